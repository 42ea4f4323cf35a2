/*
 * outfmt.h - the tool-call formats and reasoning markers of the model
 * families, as read from a chat template (outparse.c detects and parses
 * them; dialect.h has the parser's interface).
 */
#ifndef ANVIL_SRV_OUTFMT_H
#define ANVIL_SRV_OUTFMT_H

/* The tool-call formats (how a family's template shows a call, and so
 * how its model writes one). */
enum srv_toolfmt {
    SRV_TOOLFMT_JSON = 0,    /* anvil's own: {"name": ..., "arguments": {...}} (no template says) */
    SRV_TOOLFMT_HERMES,      /* <tool_call>{"name", "arguments"}</tool_call> (Hermes, Qwen 2.5/3) */
    SRV_TOOLFMT_LLAMA3,      /* {"name", "parameters"} / <|python_tag|> (Llama 3.x) */
    SRV_TOOLFMT_MISTRAL,     /* [TOOL_CALLS][{...}] or [TOOL_CALLS]name[ARGS]{...} */
    SRV_TOOLFMT_HARMONY,     /* gpt-oss: to=functions.NAME on the commentary channel */
    SRV_TOOLFMT_DEEPSEEK_R1, /* <｜tool▁calls▁begin｜>... */
    SRV_TOOLFMT_DEEPSEEK_V3,
    SRV_TOOLFMT_GRANITE,     /* <|tool_call|>[{...}] */
    SRV_TOOLFMT_COMMAND_R,   /* Action: ```json [...]``` */
    SRV_TOOLFMT_FUNCTIONARY, /* >>>name\n{...} / <function=name>{...}</function> */
    SRV_TOOLFMT_GENERIC,     /* {"tool_calls": [...]} / {"response": ...} */
    SRV_TOOLFMT_COUNT
};

/* How a family marks its thoughts. */
enum srv_reasoningfmt {
    SRV_REASONING_NONE = 0, /* all text is content */
    SRV_REASONING_THINK,    /* <think>...</think> (DeepSeek-R1, Qwen 3, QwQ, Granite) */
    SRV_REASONING_HARMONY,  /* gpt-oss: the analysis channel */
    SRV_REASONING_COUNT
};

/* Which reasoning markers and tool-call format apply; read from the
 * model's chat template (never from its name) by srv_outfmt_detect. */
#define SRV_OUTFMT_TOOLS 128 /* = SRV_MAX_TOOLS */
struct srv_outfmt {
    enum srv_toolfmt tool_format;
    enum srv_reasoningfmt reasoning_format;
    /* the request's tools, by srv_tool_hash of their names (structured.c
     * fills them in): a Hermes answer that is a bare or fenced JSON call
     * object is a call when its name is one of them; 0 tools: never */
    int n_tools;
    unsigned long long tool_hash[SRV_OUTFMT_TOOLS];
};
/* 64-bit FNV-1a of a tool's name. */
unsigned long long srv_tool_hash(const char *s, unsigned long n);
/* From the template source (NULL or "" = none: JSON, no reasoning). */
void srv_outfmt_detect(const char *template_src, struct srv_outfmt *out);
const char *srv_toolfmt_name(enum srv_toolfmt f);
const char *srv_reasoningfmt_name(enum srv_reasoningfmt f);

#endif
