// A small, safe markdown renderer. Model text is never parsed as HTML: the output is
// built with DOM calls (createElement, textContent), so "<img onerror=…>" stays text.
// Subset: paragraphs, line breaks, # headings, - / 1. lists, ``` code blocks, `code`,
// **bold**, *italic*, [links](https://…) (only http, https and mailto URLs become links).

const SAFE_URL = /^(https?:|mailto:)/i;

export function safeHref(url) {
  const trimmed = String(url).trim();
  return SAFE_URL.test(trimmed) ? trimmed : null;
}

// Inline: code spans first (their content is literal), then links, bold, italic.
const INLINE_SOURCE = /(`+)([\s\S]*?[^`])\1(?!`)|\[([^\]\n]{1,500})\]\(([^()\s]{1,2000})\)|\*\*([^*\n][\s\S]*?)\*\*|(?<![\w*])\*([^*\s][^*\n]*?)\*(?![\w*])|(?<![\w_])_([^_\s][^_\n]*?)_(?![\w_])/;

function inline(parent, text) {
  let last = 0;
  // Its own regex per call: the nested calls for bold/link text must not move this
  // loop's position.
  const re = new RegExp(INLINE_SOURCE.source, 'g');
  for (let m = re.exec(text); m; m = re.exec(text)) {
    if (m.index > last) appendText(parent, text.slice(last, m.index));
    if (m[1]) {
      const code = document.createElement('code');
      code.textContent = m[2];
      parent.append(code);
    } else if (m[3] !== undefined) {
      const href = safeHref(m[4]);
      if (href) {
        const a = document.createElement('a');
        a.href = href;
        a.rel = 'noopener noreferrer nofollow';
        a.target = '_blank';
        inline(a, m[3]);
        parent.append(a);
      } else {
        // An unsafe scheme (javascript:, data:, …) is shown as plain text, never a link.
        appendText(parent, m[0]);
      }
    } else if (m[5] !== undefined) {
      const b = document.createElement('strong');
      inline(b, m[5]);
      parent.append(b);
    } else {
      const i = document.createElement('em');
      inline(i, m[6] !== undefined ? m[6] : m[7]);
      parent.append(i);
    }
    last = re.lastIndex;
  }
  if (last < text.length) appendText(parent, text.slice(last));
}

function appendText(parent, text) {
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    if (i > 0) parent.append(document.createElement('br'));
    if (line) parent.append(document.createTextNode(line));
  });
}

export function renderMarkdown(source) {
  const root = document.createDocumentFragment();
  const lines = String(source ?? '').replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) {
      const p = document.createElement('p');
      inline(p, para.join('\n'));
      root.append(p);
      para = [];
    }
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
    if (fence) {
      flush();
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1; // the closing fence (or the end of a still-streaming block)
      const pre = document.createElement('pre');
      const code = document.createElement('code');
      if (fence[2]) code.dataset.lang = fence[2];
      code.textContent = body.join('\n');
      pre.append(code);
      root.append(pre);
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      flush();
      // Headings inside a message stay below the page's own (h1/h2): h3–h6.
      const h = document.createElement(`h${Math.min(6, heading[1].length + 2)}`);
      inline(h, heading[2]);
      root.append(h);
      i += 1;
      continue;
    }
    const item = line.match(/^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/);
    if (item) {
      flush();
      const ordered = /\d/.test(item[1]);
      const list = document.createElement(ordered ? 'ol' : 'ul');
      while (i < lines.length) {
        const m = lines[i].match(/^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/);
        if (!m || /\d/.test(m[1]) !== ordered) break;
        const li = document.createElement('li');
        inline(li, m[2]);
        list.append(li);
        i += 1;
      }
      root.append(list);
      continue;
    }
    if (!line.trim()) {
      flush();
    } else {
      para.push(line);
    }
    i += 1;
  }
  flush();
  return root;
}
