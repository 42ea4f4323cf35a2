/*
 * anvil chat page. Talks only to this server's public API:
 *   GET  props                  model name, template, context (for the header)
 *   POST v1/chat/completions    streamed (SSE over fetch), stopped with an AbortController
 * Paths are relative, so the page also works under a proxy's path prefix.
 *
 * Safety rule: nothing the model (or the user, or localStorage) wrote is
 * ever parsed as HTML. Markdown is rendered by the small parser below into
 * DOM nodes built with createElement and textContent; links are kept only
 * for http(s) and mailto URLs. The server's Content-Security-Policy
 * (script-src 'self') is the second line of defence.
 *
 * State kept in the browser: settings and the conversation in
 * localStorage, the API key (when the server has one) in sessionStorage
 * (this tab only). Each conversation has a random id sent as X-Session-Id,
 * the header a load balancer in front of several replicas hashes on to
 * keep the conversation on one replica (deploy/nginx/anvil.conf).
 */
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }

  // ---------------------------------------------------------------------
  // storage (best effort: it can be disabled or full)

  const store = {
    get(k, dflt) {
      try {
        const v = localStorage.getItem(k);
        return v == null ? dflt : JSON.parse(v);
      } catch (e) {
        return dflt;
      }
    },
    set(k, v) {
      try {
        localStorage.setItem(k, JSON.stringify(v));
      } catch (e) { /* private mode or quota: keep going in memory */ }
    },
  };
  const keyStore = {
    get() {
      try { return sessionStorage.getItem('anvil.key') || ''; } catch (e) { return ''; }
    },
    set(v) {
      try { if (v) sessionStorage.setItem('anvil.key', v); else sessionStorage.removeItem('anvil.key'); } catch (e) { /* memory only */ }
    },
  };

  const DEFAULTS = { system: '', temperature: 0.7, top_p: 0.95, max_tokens: 512, theme: 'auto' };
  const settings = Object.assign({}, DEFAULTS, sanitizeSettings(store.get('anvil.settings', {})));
  let messages = sanitizeMessages(store.get('anvil.chat', []));
  let sessionId = typeof store.get('anvil.session', null) === 'string' ? store.get('anvil.session') : newSessionId();
  let apiKey = keyStore.get();
  let props = null;
  let busy = null; // the AbortController of the running generation

  function sanitizeSettings(s) {
    const out = {};
    if (!s || typeof s !== 'object') return out;
    if (typeof s.system === 'string') out.system = s.system;
    for (const k of ['temperature', 'top_p', 'max_tokens'])
      if (typeof s[k] === 'number' && isFinite(s[k])) out[k] = s[k];
    if (['auto', 'light', 'dark'].includes(s.theme)) out.theme = s.theme;
    return out;
  }

  /* Stored messages are data from an earlier session: keep only the
   * fields we expect, as strings and numbers. */
  function sanitizeMessages(list) {
    if (!Array.isArray(list)) return [];
    const out = [];
    for (const m of list) {
      if (!m || (m.role !== 'user' && m.role !== 'assistant') || typeof m.content !== 'string') continue;
      const c = { role: m.role, content: m.content, state: 'done' };
      if (m.role === 'assistant' && typeof m.reasoning === 'string' && m.reasoning) c.reasoning = m.reasoning;
      if (m.state === 'stopped' || m.state === 'error') c.state = m.state;
      if (typeof m.error === 'string') c.error = m.error;
      if (m.stats && typeof m.stats === 'object') {
        c.stats = {};
        for (const k of ['n', 'tps', 'ttft'])
          if (typeof m.stats[k] === 'number' && isFinite(m.stats[k])) c.stats[k] = m.stats[k];
        if (typeof m.stats.note === 'string') c.stats.note = m.stats.note;
      }
      out.push(c);
    }
    return out;
  }

  function newSessionId() {
    const b = new Uint8Array(16);
    crypto.getRandomValues(b); // crypto.randomUUID needs a secure context; this does not
    const id = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    store.set('anvil.session', id);
    return id;
  }

  function saveChat() {
    store.set('anvil.chat', messages.map((m) => {
      const o = { role: m.role, content: m.content, state: m.state === 'streaming' ? 'stopped' : m.state };
      if (m.error) o.error = m.error;
      if (m.stats) o.stats = m.stats;
      if (m.reasoning) o.reasoning = m.reasoning;
      return o;
    }));
  }

  function saveSettings() { store.set('anvil.settings', settings); }

  // ---------------------------------------------------------------------
  // Markdown -> DOM (CommonMark's common subset: fenced code, headings,
  // lists, quotes, rules, tables, emphasis, code spans, links). Text only
  // ever reaches the page through createTextNode / textContent.

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
  const HR = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
  const QUOTE = /^ {0,3}> ?(.*)$/;
  const LIST = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*)|$)/;
  const TABLE_SEP = /^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
  const PUNCT = '\\`*_{}[]()#+-.!~|>';

  function renderMarkdown(src) {
    const frag = document.createDocumentFragment();
    blocks(src.replace(/\r\n?/g, '\n').split('\n'), frag, 0);
    return frag;
  }

  const indentOf = (s) => s.length - s.replace(/^ +/, '').length;

  function isTableStart(lines, i) {
    return lines[i].includes('|') && i + 1 < lines.length && lines[i + 1].includes('-') &&
      TABLE_SEP.test(lines[i + 1]);
  }

  function startsBlock(lines, i) {
    const l = lines[i];
    return FENCE.test(l) || HEADING.test(l) || HR.test(l) || QUOTE.test(l) || LIST.test(l) ||
      isTableStart(lines, i);
  }

  function blocks(lines, parent, depth) {
    if (depth > 12) { // pathological nesting: the rest as plain text
      parent.appendChild(el('p', null, lines.join('\n')));
      return;
    }
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) { i++; continue; }
      if ((m = FENCE.exec(line))) {
        const ch = m[1][0], n = m[1].length, body = [];
        i++;
        while (i < lines.length) {
          const t = lines[i].trim();
          if (t.length >= n && t === ch.repeat(t.length)) break;
          body.push(lines[i]);
          i++;
        }
        i++; // the closing fence; an unclosed block (mid-stream) runs to the end
        parent.appendChild(codeBlock(body.join('\n'), m[2]));
        continue;
      }
      if ((m = HEADING.exec(line))) {
        const h = el('h' + m[1].length);
        inline(m[2] || '', h, depth);
        parent.appendChild(h);
        i++;
        continue;
      }
      if (HR.test(line)) {
        parent.appendChild(el('hr'));
        i++;
        continue;
      }
      if (QUOTE.test(line)) {
        const inner = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) { inner.push(m[1]); i++; }
        const q = el('blockquote');
        blocks(inner, q, depth + 1);
        parent.appendChild(q);
        continue;
      }
      if (LIST.test(line)) {
        i = list(lines, i, parent, depth);
        continue;
      }
      if (isTableStart(lines, i)) {
        i = table(lines, i, parent, depth);
        continue;
      }
      const para = [line.trim()];
      i++;
      while (i < lines.length && lines[i].trim() && !startsBlock(lines, i)) para.push(lines[i++].trim());
      const p = el('p');
      inline(para.join('\n'), p, depth);
      parent.appendChild(p);
    }
  }

  function list(lines, i, parent, depth) {
    const first = LIST.exec(lines[i]);
    const indent = first[1].length;
    const ordered = /\d/.test(first[2]);
    const L = el(ordered ? 'ol' : 'ul');
    if (ordered) {
      const start = parseInt(first[2], 10);
      if (start !== 1) L.start = start;
    }
    const sibling = (k) => {
      const m = k < lines.length && LIST.exec(lines[k]);
      return m && m[1].length === indent && /\d/.test(m[2]) === ordered;
    };
    while (i < lines.length && sibling(i)) {
      const m = LIST.exec(lines[i]);
      const item = [m[3] || ''];
      let loose = false;
      i++;
      while (i < lines.length) {
        const l = lines[i];
        if (!l.trim()) {
          let k = i + 1;
          while (k < lines.length && !lines[k].trim()) k++;
          if (k < lines.length && indentOf(lines[k]) > indent && !sibling(k)) {
            item.push('');
            loose = true;
            i++;
            continue;
          }
          break;
        }
        const lm = LIST.exec(l);
        if (lm && lm[1].length <= indent) break;
        if (!lm && indentOf(l) <= indent && startsBlock(lines, i)) break;
        item.push(l.slice(Math.min(indentOf(l), indent + 2)));
        i++;
      }
      const li = el('li');
      blocks(item, li, depth + 1);
      // a tight item shows its first paragraph inline, without a <p>
      if (!loose && li.firstChild && li.firstChild.nodeName === 'P') {
        const p = li.firstChild;
        while (p.firstChild) li.insertBefore(p.firstChild, p);
        li.removeChild(p);
      }
      L.appendChild(li);
      // blank lines between two items of the same list keep it one list
      let k = i;
      while (k < lines.length && !lines[k].trim()) k++;
      if (k > i && sibling(k)) i = k;
    }
    parent.appendChild(L);
    return i;
  }

  function cells(line) {
    let s = line.trim();
    if (s.startsWith('|')) s = s.slice(1);
    if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
    const out = [];
    let cur = '';
    for (let k = 0; k < s.length; k++) {
      if (s[k] === '\\' && s[k + 1] === '|') { cur += '|'; k++; continue; }
      if (s[k] === '|') { out.push(cur.trim()); cur = ''; continue; }
      cur += s[k];
    }
    out.push(cur.trim());
    return out;
  }

  function table(lines, i, parent, depth) {
    const head = cells(lines[i]);
    const align = cells(lines[i + 1]).map((c) =>
      c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : '');
    i += 2;
    const t = el('table'), thead = el('thead'), tbody = el('tbody'), hr = el('tr');
    head.forEach((c, k) => {
      const th = el('th');
      if (align[k]) th.style.textAlign = align[k];
      inline(c, th, depth);
      hr.appendChild(th);
    });
    thead.appendChild(hr);
    while (i < lines.length && lines[i].trim() && lines[i].includes('|')) {
      const row = cells(lines[i]), tr = el('tr');
      for (let k = 0; k < head.length; k++) {
        const td = el('td');
        if (align[k]) td.style.textAlign = align[k];
        inline(row[k] || '', td, depth);
        tr.appendChild(td);
      }
      tbody.appendChild(tr);
      i++;
    }
    t.append(thead, tbody);
    parent.appendChild(t);
    return i;
  }

  const LINK = /\[([^\]\n]+)\]\(\s*<?([^\s<>()]*(?:\([^\s<>()]*\)[^\s<>()]*)*)>?(?:\s+"[^"\n]*")?\s*\)/y;
  const AUTOLINK = /https?:\/\/[^\s<>"'`]+/iy;
  const WORD = /[\p{L}\p{N}]/u;

  function inline(text, parent, depth) {
    if (depth > 24) { parent.appendChild(document.createTextNode(text)); return; }
    let buf = '';
    const flush = () => {
      if (buf) parent.appendChild(document.createTextNode(buf));
      buf = '';
    };
    let i = 0;
    while (i < text.length) {
      const c = text[i];
      if (c === '\\' && i + 1 < text.length && PUNCT.includes(text[i + 1])) {
        buf += text[i + 1];
        i += 2;
        continue;
      }
      if (c === '\n') {
        flush();
        parent.appendChild(el('br'));
        i++;
        continue;
      }
      if (c === '`') {
        let n = 1;
        while (text[i + n] === '`') n++;
        const ticks = '`'.repeat(n);
        let end = text.indexOf(ticks, i + n);
        while (end >= 0 && text[end + n] === '`') { // a longer run does not close
          let k = end;
          while (text[k] === '`') k++;
          end = text.indexOf(ticks, k);
        }
        if (end >= 0) {
          flush();
          let code = text.slice(i + n, end).replace(/\n/g, ' ');
          if (code.length > 2 && code[0] === ' ' && code[code.length - 1] === ' ' && code.trim()) code = code.slice(1, -1);
          parent.appendChild(el('code', null, code));
          i = end + n;
          continue;
        }
        buf += ticks;
        i += n;
        continue;
      }
      if (c === '*' || c === '_' || c === '~') {
        const dbl = text[i + 1] === c;
        if (c === '~' && !dbl) { buf += c; i++; continue; }
        const d = dbl ? c + c : c;
        const after = text[i + d.length];
        const intraword = c === '_' && i > 0 && WORD.test(text[i - 1]); // snake_case is not emphasis
        if (after && !/\s/.test(after) && !intraword) {
          const end = closing(text, d, i + d.length);
          if (end > 0) {
            flush();
            const node = el(c === '~' ? 's' : dbl ? 'strong' : 'em');
            inline(text.slice(i + d.length, end), node, depth + 1);
            parent.appendChild(node);
            i = end + d.length;
            continue;
          }
        }
        buf += d;
        i += d.length;
        continue;
      }
      if (c === '[') {
        LINK.lastIndex = i;
        const m = LINK.exec(text);
        if (m) {
          flush();
          link(parent, m[1], m[2], false, depth);
          i += m[0].length;
          continue;
        }
      }
      if ((c === 'h' || c === 'H') && (i === 0 || /[\s(<"'[]/.test(text[i - 1]))) {
        AUTOLINK.lastIndex = i;
        const m = AUTOLINK.exec(text);
        if (m) {
          let url = m[0].replace(/[.,;:!?'"*_]+$/, '');
          // a closing parenthesis belongs to the URL only when it opened one
          while (url.endsWith(')') && (url.match(/\(/g) || []).length < (url.match(/\)/g) || []).length) url = url.slice(0, -1);
          flush();
          link(parent, url, url, true, depth);
          i += url.length;
          continue;
        }
      }
      buf += c;
      i++;
    }
    flush();
  }

  /* Index of the delimiter d closing an emphasis opened before `from`. */
  function closing(text, d, from) {
    let j = from;
    while ((j = text.indexOf(d, j)) >= 0) {
      const before = text[j - 1], after = text[j + d.length] || '';
      if (j > from && !/\s/.test(before) && !(d[0] === '_' && WORD.test(after))) {
        if (d.length === 1 && after === d) { j += 2; continue; } // part of a ** run
        return j;
      }
      j += d.length;
    }
    return -1;
  }

  function link(parent, label, url, bare, depth) {
    if (!/^(https?:\/\/|mailto:)/i.test(url)) { // javascript:, data:, relative: text only
      parent.appendChild(document.createTextNode(bare ? url : label));
      return;
    }
    const a = el('a');
    a.href = url;
    a.target = '_blank';
    a.rel = 'noopener noreferrer nofollow';
    if (bare) a.textContent = label;
    else inline(label, a, depth + 1);
    parent.appendChild(a);
  }

  // code blocks: a language label, a copy button, light highlighting

  const KEYWORDS = new Set(('if else elif for while do return function def class import from as const let var new ' +
    'try catch except finally throw raise break continue switch case default in of not and or is None True False ' +
    'null true false undefined this self struct enum typedef static void int char float double long unsigned ' +
    'signed bool auto fn pub use mod impl trait match loop mut where async await yield lambda with pass global ' +
    'package public private protected extends implements interface then fi done esac local export func defer ' +
    'chan range sizeof goto volatile extern').split(' '));
  const HASH_COMMENT = /^(py|python|sh|bash|shell|zsh|console|rb|ruby|r|ya?ml|toml|perl|pl|make|makefile|dockerfile|conf|ini|nginx)$/i;

  function codeBlock(code, lang) {
    const box = el('div', 'codeblock');
    const head = el('div', 'code-head');
    head.appendChild(el('span', null, lang || 'text'));
    const copy = el('button', 'copy', 'Copy');
    copy.type = 'button';
    copy.addEventListener('click', () => copyText(code, copy));
    head.appendChild(copy);
    const pre = el('pre'), c = el('code');
    if (lang) highlight(code, lang, c);
    else c.textContent = code;
    pre.appendChild(c);
    box.append(head, pre);
    return box;
  }

  function highlight(code, lang, out) {
    if (code.length > 50000) { out.textContent = code; return; }
    const comment = HASH_COMMENT.test(lang) ? '#[^\\n]*' : '\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?(?:\\*\\/|$)';
    const re = new RegExp('(' + comment + ')|("(?:[^"\\\\\\n]|\\\\.)*"?|\'(?:[^\'\\\\\\n]|\\\\.)*\'?|`(?:[^`\\\\]|\\\\.)*`?)' +
      '|(\\b(?:0x[0-9a-fA-F]+|\\d[\\d_]*(?:\\.\\d+)?(?:[eE][+-]?\\d+)?)\\b)|([A-Za-z_][A-Za-z0-9_]*)', 'g');
    let last = 0, m;
    const span = (cls, s) => out.appendChild(el('span', cls, s));
    while ((m = re.exec(code))) {
      if (m.index > last) out.appendChild(document.createTextNode(code.slice(last, m.index)));
      if (m[1]) span('tok-com', m[1]);
      else if (m[2]) span('tok-str', m[2]);
      else if (m[3]) span('tok-num', m[3]);
      else if (KEYWORDS.has(m[4])) span('tok-kw', m[4]);
      else out.appendChild(document.createTextNode(m[4]));
      last = re.lastIndex;
    }
    if (last < code.length) out.appendChild(document.createTextNode(code.slice(last)));
  }

  function copyText(text, button) {
    const done = () => {
      const was = button.textContent;
      button.textContent = 'Copied';
      setTimeout(() => { button.textContent = was; }, 1200);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => {});
      return;
    }
    // plain http on another host: no Clipboard API, use a hidden textarea
    const t = el('textarea');
    t.value = text;
    t.style.position = 'fixed';
    t.style.opacity = '0';
    document.body.appendChild(t);
    t.select();
    try { document.execCommand('copy'); done(); } catch (e) { /* nothing to do */ }
    t.remove();
  }

  // ---------------------------------------------------------------------
  // the conversation view

  const view = new WeakMap(); // message -> its DOM nodes
  const log = $('messages');

  function statsText(s) {
    if (!s) return '';
    const parts = [];
    if (s.n != null) parts.push(`${s.n} token${s.n === 1 ? '' : 's'}`);
    if (s.tps) parts.push(`${s.tps.toFixed(1)} tok/s`);
    if (s.ttft != null) parts.push(`first token ${Math.round(s.ttft)} ms`);
    if (s.note) parts.push(s.note);
    return parts.join(' · ');
  }

  function messageNode(m) {
    const wrap = el('div', 'msg');
    wrap.dataset.role = m.role;
    const bubble = el('div', 'bubble');
    /* the model's thought (reasoning_content), apart from the answer:
     * a collapsible block above it, shown only when there is one */
    const thought = el('details', 'thought');
    const summary = el('summary', null, 'Thought');
    const thoughtText = el('div', 'thought-text');
    thought.append(summary, thoughtText);
    thought.hidden = true;
    const content = el('div', 'content');
    bubble.append(thought, content);
    wrap.appendChild(bubble);
    const meta = el('div', 'meta');
    const badge = el('span', 'badge');
    const stats = el('span', 'stats');
    meta.append(badge, stats);
    const copy = el('button', 'act', 'Copy');
    copy.type = 'button';
    copy.addEventListener('click', () => copyText(m.content, copy));
    meta.appendChild(copy);
    if (m.role === 'assistant') {
      const again = el('button', 'act regen', 'Regenerate');
      again.type = 'button';
      again.addEventListener('click', () => regenerate(m));
      meta.appendChild(again);
    }
    wrap.appendChild(meta);
    const err = el('div', 'error-box');
    wrap.appendChild(err);
    view.set(m, { wrap, content, badge, stats, err, thought, thoughtText });
    updateNode(m);
    return wrap;
  }

  function updateNode(m) {
    const v = view.get(m);
    if (!v) return;
    v.wrap.dataset.state = m.state || 'done';
    if (m.role === 'user') v.content.textContent = m.content;
    else v.content.replaceChildren(renderMarkdown(m.content));
    if (v.thought) {
      v.thought.hidden = !m.reasoning;
      v.thoughtText.textContent = m.reasoning || '';
    }
    v.badge.textContent = m.state === 'stopped' ? 'stopped' : m.state === 'error' ? 'error' : '';
    v.stats.textContent = statsText(m.stats);
    v.err.textContent = m.error || '';
    v.err.hidden = !m.error;
  }

  function renderAll() {
    for (const n of Array.from(log.children)) if (n.id !== 'empty') n.remove();
    for (const m of messages) log.appendChild(messageNode(m));
    $('empty').hidden = messages.length > 0;
    scrollToEnd(true);
  }

  function nearBottom() { return log.scrollHeight - log.scrollTop - log.clientHeight < 80; }
  function scrollToEnd(force) { if (force || nearBottom()) log.scrollTop = log.scrollHeight; }

  // ---------------------------------------------------------------------
  // talking to the server

  function headers() {
    const h = { 'Content-Type': 'application/json', 'X-Session-Id': sessionId };
    if (apiKey) h.Authorization = 'Bearer ' + apiKey;
    return h;
  }

  /* The message of an OpenAI-shaped error response, or the status line. */
  async function errorOf(r) {
    try {
      const j = await r.json();
      if (j && j.error && typeof j.error.message === 'string') return `${r.status}: ${j.error.message}`;
    } catch (e) { /* not JSON (a proxy's page) */ }
    return `${r.status} ${r.statusText || 'error'}`;
  }

  async function loadProps() {
    let r;
    try {
      r = await fetch('props', { headers: headers() });
    } catch (e) {
      $('model-name').textContent = 'server unreachable';
      return;
    }
    if (r.status === 401) {
      askKey(apiKey ? 'That key was not accepted.' : '');
      return;
    }
    if (!r.ok) {
      $('model-name').textContent = 'server error: ' + (await errorOf(r));
      return;
    }
    props = await r.json();
    $('model-name').textContent = props.model_id || 'model';
    $('model-name').title = props.desc || '';
    chip('model-template', props.chat_template_name ? 'template ' + props.chat_template_name : 'no chat template');
    chip('model-ctx', props.n_ctx ? `ctx ${props.n_ctx}` : '');
    chip('model-replica', props.replica_id ? `replica ${props.replica_id}` : '');
    $('max-tokens').max = props.n_ctx || '';
    $('key-row').hidden = !apiKey;
    $('about').textContent = [props.desc, props.kernels && `kernels ${props.kernels}`,
      props.parallel && `${props.parallel} parallel`].filter(Boolean).join(' · ');
  }

  function chip(id, text) {
    $(id).textContent = text;
    $(id).hidden = !text;
  }

  function askKey(msg) {
    $('key-dialog').hidden = false;
    $('key-error').textContent = msg || '';
    $('key-error').hidden = !msg;
    $('api-key').value = '';
    $('api-key').focus();
  }

  function apiMessages(upto) {
    const out = [];
    const sys = settings.system.trim();
    if (sys) out.push({ role: 'system', content: sys });
    for (const m of messages.slice(0, upto)) {
      if (m.role === 'assistant' && (m.state === 'error' || !m.content)) continue;
      out.push({ role: m.role, content: m.content });
    }
    return out;
  }

  function setBusy(on) {
    $('send').hidden = on;
    $('stop').hidden = !on;
    updateSend();
    for (const b of document.querySelectorAll('.regen')) b.disabled = on;
  }

  function updateSend() { $('send').disabled = !!busy || !$('prompt').value.trim(); }

  /* Stream one assistant answer to the conversation so far. */
  async function generate() {
    const ctrl = new AbortController();
    busy = ctrl;
    setBusy(true);
    const m = { role: 'assistant', content: '', reasoning: '', state: 'streaming', stats: null };
    const body = {
      messages: apiMessages(messages.length),
      stream: true,
      stream_options: { include_usage: true },
      temperature: settings.temperature,
      top_p: settings.top_p,
      max_tokens: settings.max_tokens,
    };
    if (props && props.model_id) body.model = props.model_id;
    messages.push(m);
    $('empty').hidden = true;
    log.appendChild(messageNode(m));
    scrollToEnd(true);

    const t0 = performance.now();
    let tFirst = 0, tLast = 0, nChunks = 0, usage = null, sawDone = false, pending = false;
    const live = () => {
      const st = { n: nChunks, ttft: tFirst ? tFirst - t0 : null };
      if (nChunks > 1 && tLast > tFirst) st.tps = (nChunks - 1) / ((tLast - tFirst) / 1000);
      return st;
    };
    const paint = () => {
      pending = false;
      if (m.state !== 'streaming') return; // the final update below has the last word
      const stick = nearBottom();
      m.stats = live();
      updateNode(m);
      if (stick) scrollToEnd(true);
    };
    try {
      const r = await fetch('v1/chat/completions', {
        method: 'POST', headers: headers(), body: JSON.stringify(body), signal: ctrl.signal,
      });
      if (!r.ok) {
        const msg = await errorOf(r);
        if (r.status === 401) askKey('The server asks for an API key.');
        throw new Error(msg);
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let data = '';
          for (const line of event.split('\n')) if (line.startsWith('data:')) data += line.slice(5).replace(/^ /, '');
          if (!data) continue;
          if (data === '[DONE]') { sawDone = true; continue; }
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message || 'the server reported an error');
          if (j.usage) usage = j.usage;
          const ch = j.choices && j.choices[0];
          const piece = ch && ch.delta && ch.delta.content;
          const thought = ch && ch.delta && ch.delta.reasoning_content;
          if (typeof thought === 'string' && thought) {
            const now = performance.now();
            if (!tFirst) tFirst = now;
            tLast = now;
            nChunks++;
            m.reasoning += thought;
            if (!pending) { pending = true; requestAnimationFrame(paint); }
          }
          if (piece) {
            const now = performance.now();
            if (!tFirst) tFirst = now;
            tLast = now;
            nChunks++;
            m.content += piece;
            if (!pending) { pending = true; requestAnimationFrame(paint); }
          }
          if (ch && ch.finish_reason) m.finish = ch.finish_reason;
        }
      }
      if (!sawDone) throw new Error('the connection ended before the answer did');
      m.state = 'done';
    } catch (e) {
      if (ctrl.signal.aborted) m.state = 'stopped';
      else { m.state = 'error'; m.error = e && e.message ? e.message : String(e); }
    }
    m.stats = live();
    if (usage && typeof usage.completion_tokens === 'number') {
      m.stats.n = usage.completion_tokens;
      if (usage.completion_tokens > 1 && tLast > tFirst)
        m.stats.tps = (usage.completion_tokens - 1) / ((tLast - tFirst) / 1000);
    }
    if (m.finish === 'length' && m.state === 'done') m.stats.note = 'stopped at max tokens';
    busy = null;
    const stick = nearBottom();
    updateNode(m);
    if (stick) scrollToEnd(true);
    setBusy(false);
    saveChat();
  }

  function send(text) {
    if (busy || !text.trim()) return;
    messages.push({ role: 'user', content: text, state: 'done' });
    $('empty').hidden = true;
    log.appendChild(messageNode(messages[messages.length - 1]));
    $('prompt').value = '';
    grow();
    saveChat();
    generate();
  }

  function regenerate(m) {
    if (busy) return;
    const k = messages.indexOf(m);
    if (k < 0) return;
    messages = messages.slice(0, k);
    renderAll();
    generate();
  }

  function newChat() {
    if (busy) busy.abort();
    messages = [];
    sessionId = newSessionId();
    saveChat();
    renderAll();
    $('prompt').focus();
  }

  // ---------------------------------------------------------------------
  // settings, theme, composer

  function applyTheme() {
    const t = settings.theme;
    if (t === 'auto') delete document.documentElement.dataset.theme;
    else document.documentElement.dataset.theme = t;
    $('theme').title = 'Theme: ' + t;
    $('theme').setAttribute('aria-label', 'Theme: ' + t);
  }

  function bindSettings() {
    const sys = $('system'), temp = $('temperature'), topP = $('top-p'), maxT = $('max-tokens');
    sys.value = settings.system;
    temp.value = settings.temperature;
    topP.value = settings.top_p;
    maxT.value = settings.max_tokens;
    const show = () => {
      $('temperature-out').textContent = Number(settings.temperature).toFixed(2);
      $('top-p-out').textContent = Number(settings.top_p).toFixed(2);
    };
    show();
    sys.addEventListener('input', () => { settings.system = sys.value; saveSettings(); });
    temp.addEventListener('input', () => { settings.temperature = Number(temp.value); show(); saveSettings(); });
    topP.addEventListener('input', () => { settings.top_p = Number(topP.value); show(); saveSettings(); });
    maxT.addEventListener('change', () => {
      let v = Math.round(Number(maxT.value));
      const cap = props && props.n_ctx ? props.n_ctx : 1 << 20;
      if (!isFinite(v) || v < 1) v = DEFAULTS.max_tokens;
      if (v > cap) v = cap;
      maxT.value = v;
      settings.max_tokens = v;
      saveSettings();
    });
    $('theme').addEventListener('click', () => {
      const order = ['auto', 'light', 'dark'];
      settings.theme = order[(order.indexOf(settings.theme) + 1) % order.length];
      applyTheme();
      saveSettings();
    });
    $('new-chat').addEventListener('click', newChat);
    $('toggle-settings').addEventListener('click', () => {
      const open = $('settings').classList.toggle('open');
      $('toggle-settings').setAttribute('aria-expanded', String(open));
    });
    $('forget-key').addEventListener('click', () => {
      apiKey = '';
      keyStore.set('');
      $('key-row').hidden = true;
      loadProps();
    });
  }

  function grow() {
    const p = $('prompt');
    p.style.height = 'auto';
    p.style.height = Math.min(p.scrollHeight, 220) + 'px';
    p.style.overflowY = p.scrollHeight > 220 ? 'auto' : 'hidden';
    updateSend();
  }

  function bindComposer() {
    const p = $('prompt');
    p.addEventListener('input', grow);
    p.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        send(p.value);
      }
    });
    $('composer').addEventListener('submit', (e) => {
      e.preventDefault();
      send(p.value);
    });
    $('stop').addEventListener('click', () => { if (busy) busy.abort(); });
    for (const b of document.querySelectorAll('.suggestion')) b.addEventListener('click', () => send(b.textContent));
    $('key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      apiKey = $('api-key').value.trim();
      keyStore.set(apiKey);
      $('key-dialog').hidden = true;
      loadProps();
    });
  }

  applyTheme();
  bindSettings();
  bindComposer();
  renderAll();
  loadProps();
  $('prompt').focus();
})();
