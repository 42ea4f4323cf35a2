/*
 * bench_attn.h - the decode-attention micro-benchmark (SCENARIOS.md,
 * "Kernel micro-benchmarks"), called by `anvil bench --attention`.
 */
#ifndef ANVIL_BENCH_ATTN_H
#define ANVIL_BENCH_ATTN_H

/* argv[0] is the command name; options (all optional):
 *   --shape LIST                      smollm2 (9/3 heads, 64), llama3-8b
 *                                     (32/8, 128), mqa (8/1, 128), or all
 *                                     (default: smollm2,llama3-8b)
 *   --batch 1,4,16,32,64,128          sequences per step
 *   --ctx 256,512,1024,2048,8192      KV length of every sequence
 *   --threads N                       default: online CPUs
 *   --kv-type f16|q8_0                default f16
 *   --block N                         tokens per block (default 16)
 *   --split off,on,auto               schedules to time (default all three)
 *   --kernels auto|ref|avx2|avx512    attention variant (default auto)
 *   --footprint MB                    KV bytes touched per timed loop,
 *                                     spread over layers (default 1024:
 *                                     bigger than the caches)
 *   --max-mem MB                      skip cases needing more (default 3072)
 *   -r N                              timed calls per case (default 30)
 *   --no-bw                           skip the bandwidth measurement
 *   --cpu-time                        per-thread CPU clocks instead of the
 *                                     wall clock: a call costs the slowest
 *                                     thread's CPU time (for a busy shared
 *                                     machine, where descheduling would
 *                                     otherwise dominate)
 *   --json                            one JSON object per case
 * Returns 0, 1 on a runtime failure (including a kernel that disagrees
 * with the reference), 2 on bad usage. */
int bench_attention(int argc, char **argv);

#endif
