// The Hermes web client: an iris device in a browser tab (docs/web.md).
// One WebSocket to the edge that served this page; every frame is documented in
// docs/protocol/iris.md and media.md. No framework: DOM built with textContent only.

import { renderMarkdown, safeHref } from './md.js';
import { sha256Hex } from './sha256.js';

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('data-')) node.setAttribute(key, value);
    else if (key.startsWith('aria-') || key === 'role' || key === 'tabindex') node.setAttribute(key, value);
    else node[key] = value;
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
};

// -- stored per origin: the token and this browser's device id
const TOKEN_KEY = 'hdg.token';
const DEVICE_KEY = 'hdg.device';
const SLASH_COMMANDS = [
  ['/new', 'start a new conversation in this lane'],
  ['/stop', 'stop the running turn'],
  ['/model', 'choose the model'],
  ['/reasoning', 'choose the reasoning effort'],
  ['/yolo', 'toggle approvals off for this lane'],
  ['/approve', 'approve the pending command'],
  ['/deny', 'deny the pending command'],
  ['/help', "Hermes' command list"],
];

function newId(prefix) {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

function deviceId() {
  let id = localStorage.getItem(DEVICE_KEY);
  if (!id) {
    id = newId('web-');
    localStorage.setItem(DEVICE_KEY, id);
  }
  return id;
}

// The token arrives in the fragment (never sent to a server, so never in a log):
// `#token=…`, or a whole pairing URI `#pair=hermes-device://pair?…`.
function tokenFrom(text) {
  const value = String(text || '').trim();
  if (!value) return null;
  if (value.startsWith('hermes-device://')) {
    try {
      return new URL(value.replace(/^hermes-device:/, 'http:')).searchParams.get('token');
    } catch {
      return null;
    }
  }
  if (value.includes('#')) return tokenFrom(value.slice(value.indexOf('#') + 1));
  const params = new URLSearchParams(value);
  if (params.get('token')) return params.get('token');
  if (params.get('pair')) return tokenFrom(params.get('pair'));
  return /^[A-Za-z0-9._~-]{8,512}$/.test(value) ? value : null;
}

// -- message ids: one place decides which id a frame's message has, so a change of the
// server's id scheme (live, history and search sharing one id) is adapted here alone.
function messageIdOf(frame) {
  if (frame.message_id) return String(frame.message_id);
  if (frame.run_id) return `draft-${frame.run_id}`;
  return null;
}

// Search hits name a transcript row by its number, history by `m<number>`: both are
// the same message.
function transcriptIdOf(id) {
  const text = String(id);
  return /^\d+$/.test(text) ? `m${text}` : text;
}

const laneKey = (chatId, threadId) => `${chatId}|${threadId ?? ''}`;

// -- state
const state = {
  token: null,
  device: null,
  ws: null,
  connected: false,
  cursor: null, // highest cursor seen; null until the first hello.ack
  attempts: 0,
  reconnectTimer: null,
  stopped: false,
  pending: new Map(), // request_id -> {resolve, reject}
  channels: new Map(), // laneKey -> entry
  lanes: new Map(), // laneKey -> Lane
  current: null, // {chat_id, thread_id}
  waiters: [], // resolved on the next successful hello.ack
  ackTimer: null,
  notify: false,
};

class Lane {
  constructor(chatId, threadId) {
    this.chatId = chatId;
    this.threadId = threadId ?? null;
    this.items = new Map(); // id -> element
    this.node = el('div', { class: 'lane', 'data-lane': laneKey(chatId, threadId) });
    this.loaded = false;
    this.activeRun = null;
    this.runs = new Map(); // run_id -> element holding the run's tool rows
  }
}

function lane(chatId, threadId) {
  const key = laneKey(chatId, threadId);
  let found = state.lanes.get(key);
  if (!found) {
    found = new Lane(chatId, threadId);
    state.lanes.set(key, found);
  }
  return found;
}

// -- the connection
function wsUrl() {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${location.host}/ws`;
}

function setConn(stateName, text) {
  const node = $('conn');
  node.dataset.state = stateName;
  node.textContent = text;
  document.body.dataset.conn = stateName;
}

function connect() {
  if (state.stopped) return;
  clearTimeout(state.reconnectTimer);
  setConn(state.attempts ? 'reconnecting' : 'connecting', state.attempts ? 'Reconnecting…' : 'Connecting…');
  let ws;
  try {
    ws = new WebSocket(wsUrl());
  } catch {
    scheduleReconnect();
    return;
  }
  state.ws = ws;
  ws.binaryType = 'arraybuffer';
  ws.onopen = () => {
    const hello = {
      type: 'hello',
      version: 1,
      token: state.token,
      device_id: state.device,
      device_name: `Web (${navigator.platform || 'browser'})`.slice(0, 128),
      caps: ['streaming'],
      request_id: 'hello',
    };
    // With a cursor the gateway replays everything after it: nothing missed or doubled.
    if (state.cursor !== null) hello.cursor = state.cursor;
    ws.send(JSON.stringify(hello));
  };
  ws.onmessage = (event) => {
    if (typeof event.data !== 'string') {
      onBinary(event.data);
      return;
    }
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch {
      return;
    }
    try {
      onFrame(frame);
    } catch (err) {
      console.error('frame handling failed', frame.type, err);
    }
  };
  ws.onclose = (event) => {
    if (state.ws !== ws) return;
    state.ws = null;
    state.connected = false;
    for (const { reject } of state.pending.values()) reject(new Error('disconnected'));
    state.pending.clear();
    onClosed(event.code);
  };
}

function onClosed(code) {
  const refused = {
    4401: 'The gateway refused this token: it is wrong, or it was rotated. Pair again with the new link.',
    4403: 'This browser was revoked by the gateway operator. Pair again to continue.',
    4429: 'Too many failed attempts from this address: the gateway locked it out for a minute.',
    4426: 'This web client is older than the gateway: reload the page.',
  }[code];
  if (refused) {
    if (code === 4403) localStorage.removeItem(DEVICE_KEY); // a revoked id never comes back
    if (code !== 4429) localStorage.removeItem(TOKEN_KEY);
    state.stopped = true;
    setConn('refused', 'Not connected');
    showPair(refused);
    return;
  }
  setConn('offline', 'Offline — reconnecting');
  scheduleReconnect();
}

function scheduleReconnect() {
  // Exponential backoff with jitter, capped: a fleet of tabs does not hammer a restarting edge.
  const base = Math.min(15000, 400 * 2 ** Math.min(state.attempts, 6));
  state.attempts += 1;
  state.reconnectTimer = setTimeout(connect, base / 2 + Math.random() * (base / 2));
}

function send(frame) {
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN) throw new Error('not connected');
  state.ws.send(JSON.stringify(frame));
}

function request(frame, timeoutMs = 30000) {
  const id = frame.request_id || newId('r');
  frame.request_id = id;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      state.pending.delete(id);
      reject(new Error('no answer'));
    }, timeoutMs);
    state.pending.set(id, {
      resolve: (f) => { clearTimeout(timer); resolve(f); },
      reject: (e) => { clearTimeout(timer); reject(e); },
    });
    try {
      send(frame);
    } catch (err) {
      state.pending.delete(id);
      clearTimeout(timer);
      reject(err);
    }
  });
}

function whenConnected() {
  if (state.connected) return Promise.resolve();
  return new Promise((resolve) => state.waiters.push(resolve));
}

function scheduleAck() {
  if (state.ackTimer) return;
  state.ackTimer = setTimeout(() => {
    state.ackTimer = null;
    if (state.connected && state.cursor !== null && !document.hidden) {
      try { send({ type: 'ack', cursor: state.cursor }); } catch { /* next time */ }
    }
  }, 1000);
}

// -- frames
function onFrame(frame) {
  if (frame.type === 'hello.ack') {
    onHelloAck(frame);
    return;
  }
  if (typeof frame.cursor === 'number') {
    // Exactly-once display: a frame at or below the cursor was already shown.
    if (state.cursor !== null && frame.cursor <= state.cursor) return;
    state.cursor = frame.cursor;
    scheduleAck();
  }
  // A send's answer is matched by its client_id too (it is also its request_id).
  const rid = state.pending.has(frame.request_id) ? frame.request_id : frame.client_id;
  if (rid !== undefined && state.pending.has(rid) && frame.type !== 'message') {
    const waiter = state.pending.get(rid);
    state.pending.delete(rid);
    if (frame.type === 'error') waiter.reject(Object.assign(new Error(frame.error?.message || 'error'), { code: frame.error?.code, frame }));
    else waiter.resolve(frame);
    // A sequenced answer (picker.resolved) is also an event every device shows.
    if (typeof frame.cursor !== 'number') return;
  }
  const handler = HANDLERS[frame.type];
  if (handler) handler(frame);
}

function onHelloAck(frame) {
  const first = state.cursor === null;
  state.connected = true;
  state.attempts = 0;
  if (first || frame.sync_cursor < state.cursor) state.cursor = frame.sync_cursor;
  setConn('online', 'Connected');
  for (const entry of frame.channels || []) putChannel(entry);
  if (!state.current || !state.channels.has(laneKey(state.current.chat_id, state.current.thread_id))) {
    const def = [...state.channels.values()].find((c) => c.is_default) || [...state.channels.values()][0];
    if (def) openLane(def.chat_id, def.thread_id ?? null);
  }
  renderChannels();
  if (frame.gap) {
    // Events were dropped by retention: reload what is shown.
    for (const l of state.lanes.values()) l.loaded = false;
    if (state.current) loadHistory(lane(state.current.chat_id, state.current.thread_id));
  }
  const waiters = state.waiters.splice(0);
  for (const w of waiters) w();
}

const HANDLERS = {
  message(f) {
    const l = lane(f.chat_id, f.thread_id);
    const id = messageIdOf(f);
    const node = upsertMessage(l, id, f.role, f.kind || f.role, f.text, f.ts);
    if (f.reasoning) setReasoning(node, f.reasoning);
    node.removeAttribute('aria-busy');
    if (f.role === 'assistant' && f.kind !== 'notice') notifyHidden('Hermes replied', f.text);
  },
  'message.start'(f) {
    const l = lane(f.chat_id, f.thread_id);
    const node = upsertMessage(l, messageIdOf(f), 'assistant', 'reply', '', f.ts);
    node.setAttribute('aria-busy', 'true');
  },
  'message.update'(f) {
    const l = lane(f.chat_id, f.thread_id);
    upsertMessage(l, messageIdOf(f), 'assistant', 'reply', f.text, f.ts);
  },
  'run.started'(f) {
    const l = lane(f.chat_id, f.thread_id);
    l.activeRun = f.run_id;
    updateComposer();
  },
  'run.finished'(f) {
    const l = lane(f.chat_id, f.thread_id);
    if (l.activeRun === f.run_id) l.activeRun = null;
    const draft = l.items.get(`draft-${f.run_id}`);
    if (draft) draft.removeAttribute('aria-busy');
    if (f.status === 'failed') {
      appendItem(l, `fail-${f.run_id}`, el('p', { class: 'notice error', role: 'alert', text: `The turn failed: ${f.error || 'unknown error'}` }));
    } else if (f.status === 'cancelled') {
      appendItem(l, `cancel-${f.run_id}`, el('p', { class: 'notice', text: 'Stopped.' }));
    }
    updateComposer();
  },
  commentary(f) {
    const l = lane(f.chat_id, f.thread_id);
    const key = `comm-${f.cursor}`;
    const node = el('p', { class: 'commentary' }, el('span', { class: 'sr-only', text: 'Hermes, thinking aloud: ' }), document.createTextNode(f.text || ''));
    insertBeforeDraft(l, f.run_id, key, node);
  },
  'tool.start'(f) {
    const l = lane(f.chat_id, f.thread_id);
    const node = el('p', { class: 'tool', 'data-tool': f.tool_call_id, 'data-status': 'running' });
    fillTool(node, f);
    insertBeforeDraft(l, f.run_id, `tool-${f.tool_call_id}`, node);
  },
  'tool.end'(f) {
    const l = lane(f.chat_id, f.thread_id);
    let node = l.items.get(`tool-${f.tool_call_id}`);
    if (!node) {
      node = el('p', { class: 'tool', 'data-tool': f.tool_call_id });
      insertBeforeDraft(l, f.run_id, `tool-${f.tool_call_id}`, node);
    }
    node.dataset.status = f.status;
    fillTool(node, f);
  },
  typing(f) {
    const l = lane(f.chat_id, f.thread_id);
    l.typing = !!f.on;
    if (isCurrent(l)) $('typing').textContent = f.on ? 'Hermes is working…' : '';
  },
  'picker.approval': (f) => showPicker(f, 'approval'),
  'picker.clarify': (f) => showPicker(f, 'clarify'),
  'picker.model': (f) => showPicker(f, 'model'),
  'picker.choice': (f) => showPicker(f, 'choice'),
  'picker.confirm': (f) => showPicker(f, 'confirm'),
  'picker.resolved'(f) {
    const card = document.querySelector(`[data-picker="${CSS.escape(f.picker_id)}"]`);
    if (!card) return;
    card.dataset.state = f.status === 'expired' ? 'expired' : 'resolved';
    const actions = card.querySelector('.picker-actions');
    if (actions) actions.remove();
    const answer = f.value ?? f.choice;
    card.append(el('p', { class: 'picker-outcome', text: f.status === 'expired' ? 'Expired: Hermes stopped waiting.' : `Answered: ${answer ?? ''}` }));
  },
  'channel.created': (f) => { putChannel(f.entry); renderChannels(); },
  'channel.renamed': (f) => { putChannel(f.entry); renderChannels(); },
  'channel.deleted': (f) => { putChannel(f.entry); renderChannels(); },
  'channel.list'(f) { for (const c of f.channels || []) putChannel(c); renderChannels(); },
  'media.offer'(f) {
    const l = lane(f.chat_id, f.thread_id);
    showMedia(l, f);
  },
  'media.ready'(f) {
    state.mediaReady = state.mediaReady || new Map();
    state.mediaReady.set(f.media_id, f.variants || []);
    for (const node of document.querySelectorAll(`[data-media="${CSS.escape(f.media_id)}"]`)) loadThumbnail(node, f.media_id);
  },
  'media.failed'(f) {
    for (const node of document.querySelectorAll(`[data-media="${CSS.escape(f.media_id)}"]`)) {
      node.append(el('span', { class: 'error', text: ` ${f.message || 'processing failed'}` }));
    }
  },
  error(f) {
    showError(f.error?.message || 'error');
  },
  'search.results': (f) => showResults(f),
};

// -- rendering messages
function isCurrent(l) {
  return state.current && laneKey(state.current.chat_id, state.current.thread_id) === laneKey(l.chatId, l.threadId);
}

function appendItem(l, key, node) {
  if (key) {
    const old = l.items.get(key);
    if (old) {
      keepAttachments(old, node);
      old.replaceWith(node);
      l.items.set(key, node);
      return node;
    }
    l.items.set(key, node);
    adoptPendingMedia(l, key, node);
  }
  const stick = isCurrent(l) && nearBottom();
  l.node.append(node);
  if (stick) scrollToBottom();
  return node;
}

function insertBeforeDraft(l, runId, key, node) {
  const draft = runId ? l.items.get(`draft-${runId}`) : null;
  if (l.items.has(key)) { appendItem(l, key, node); return; }
  l.items.set(key, node);
  // Tool rows and commentary come before the reply they lead to.
  if (draft && draft.parentNode === l.node) l.node.insertBefore(node, draft);
  else l.node.append(node);
  if (isCurrent(l) && nearBottom()) scrollToBottom();
}

const ROLE_LABEL = { user: 'You', assistant: 'Hermes', notice: 'Hermes (notice)', cron: 'Scheduled' };

function upsertMessage(l, id, role, kind, text, ts) {
  let node = id ? l.items.get(id) : null;
  const label = kind === 'notice' ? ROLE_LABEL.notice : kind === 'cron' ? ROLE_LABEL.cron : ROLE_LABEL[role] || role;
  if (!node) {
    node = el('article', { class: `msg ${role} ${kind}`, 'data-mid': id || '', tabindex: -1, 'aria-label': `${label} said` },
      el('h2', { class: 'who', text: label }),
      el('div', { class: 'body' }),
      el('div', { class: 'attachments' }));
    if (ts) node.append(el('time', { dateTime: ts, text: formatTime(ts) }));
    appendItem(l, id, node);
  }
  node.className = `msg ${role} ${kind}`;
  if (text !== undefined && text !== null && node.dataset.text !== text) {
    node.dataset.text = text;
    const body = node.querySelector('.body');
    body.replaceChildren(renderMarkdown(text));
  }
  return node;
}

function setReasoning(node, text) {
  let details = node.querySelector('details.reasoning');
  if (!details) {
    details = el('details', { class: 'reasoning' }, el('summary', { text: 'Reasoning' }), el('div', { class: 'reasoning-text' }));
    node.insertBefore(details, node.querySelector('.body'));
  }
  details.querySelector('.reasoning-text').textContent = text;
}

function fillTool(node, f) {
  const status = f.status || 'running';
  const time = f.duration_ms != null ? ` (${Math.round(f.duration_ms)} ms)` : '';
  const args = f.args_redacted && typeof f.args_redacted === 'object' ? Object.values(f.args_redacted).filter((v) => typeof v === 'string').join(' ').slice(0, 200) : '';
  node.replaceChildren(
    el('span', { class: 'tool-name', text: `Tool ${f.tool_name || ''}` }),
    document.createTextNode(args ? `: ${args}` : ''),
    el('span', { class: 'tool-status', text: ` — ${status}${time}` }),
    ...(f.error ? [el('span', { class: 'error', text: ` ${f.error}` })] : []),
  );
}

function formatTime(ts) {
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

function nearBottom() {
  const log = $('log');
  return log.scrollHeight - log.scrollTop - log.clientHeight < 120;
}

function scrollToBottom() {
  const log = $('log');
  log.scrollTop = log.scrollHeight;
}

// -- pickers
const PICKER_TITLES = {
  approval: 'Approval needed',
  clarify: 'Hermes asks',
  model: 'Choose a model',
  choice: 'Choose',
  confirm: 'Confirm',
};

function showPicker(f, kind) {
  const l = lane(f.chat_id, f.thread_id);
  const titleId = `pk-${f.picker_id}-t`;
  const card = el('section', { class: 'picker', 'data-picker': f.picker_id, 'data-kind': kind, 'aria-labelledby': titleId },
    el('h2', { id: titleId, text: f.title || PICKER_TITLES[kind] }));
  const actions = el('div', { class: 'picker-actions' });
  const answer = (value) => answerPicker(f.picker_id, value, card);
  if (kind === 'approval') {
    card.append(el('pre', {}, el('code', { text: f.command || '' })));
    if (f.description) card.append(el('p', { text: f.description }));
    const labels = { once: 'Approve once', session: 'Approve for this session', always: 'Always approve', deny: 'Deny' };
    for (const c of f.choices || []) actions.append(el('button', { type: 'button', text: labels[c] || c, 'data-value': c, onclick: () => answer(c) }));
  } else if (kind === 'clarify') {
    card.append(el('p', { text: f.question || '' }));
    for (const c of f.choices || []) actions.append(el('button', { type: 'button', text: c, 'data-value': c, onclick: () => answer(c) }));
    const inputId = `pk-${f.picker_id}-other`;
    const input = el('input', { id: inputId, autocomplete: 'off' });
    const form = el('form', { class: 'inline-form', onsubmit: (e) => { e.preventDefault(); if (input.value.trim()) answer(input.value.trim()); } },
      el('label', { htmlFor: inputId, text: 'Other answer' }), input, el('button', { type: 'submit', text: 'Answer' }));
    actions.append(form);
  } else if (kind === 'model') {
    const selectId = `pk-${f.picker_id}-model`;
    const select = el('select', { id: selectId });
    for (const p of f.providers || []) {
      const group = el('optgroup', { label: p.name || p.slug });
      for (const m of p.models || []) {
        const value = `${p.slug}:${typeof m === 'string' ? m : m.id || m.name}`;
        group.append(el('option', { value, text: typeof m === 'string' ? m : m.name || m.id, selected: p.is_current && (m === f.current_model || m.id === f.current_model) }));
      }
      select.append(group);
    }
    actions.append(el('label', { htmlFor: selectId, text: 'Model' }), select,
      el('button', { type: 'button', text: 'Use this model', onclick: () => answer(select.value) }));
  } else if (kind === 'choice') {
    for (const c of f.choices || []) actions.append(el('button', { type: 'button', text: `${c.label || c.value}${c.is_current ? ' (current)' : ''}`, 'data-value': c.value, onclick: () => answer(c.value) }));
  } else if (kind === 'confirm') {
    if (f.message) card.append(el('p', { text: f.message }));
    const labels = { once: 'Yes, once', always: 'Always', cancel: 'Cancel' };
    for (const c of f.choices || ['once', 'always', 'cancel']) actions.append(el('button', { type: 'button', text: labels[c] || c, 'data-value': c, onclick: () => answer(c) }));
  }
  card.append(actions);
  insertBeforeDraft(l, f.run_id, `picker-${f.picker_id}`, card);
  if (isCurrent(l)) actions.querySelector('button, input, select')?.focus({ preventScroll: false });
  notifyHidden(PICKER_TITLES[kind], f.question || f.command || f.title || '');
}

async function answerPicker(pickerId, value, card) {
  for (const b of card.querySelectorAll('.picker-actions button')) b.disabled = true;
  try {
    await request({ type: 'picker.select', picker_id: pickerId, value });
  } catch (err) {
    for (const b of card.querySelectorAll('.picker-actions button')) b.disabled = false;
    if (err.code === 'not_found') card.querySelector('.picker-actions')?.remove();
    showError(err.message);
  }
}

// -- channels
function putChannel(entry) {
  if (!entry || !entry.chat_id) return;
  state.channels.set(laneKey(entry.chat_id, entry.thread_id), entry);
}

function channelName(entry) {
  return entry.name || (entry.is_default ? 'Default' : entry.chat_id);
}

function renderChannels() {
  const list = $('channel-list');
  const entries = [...state.channels.values()].filter((c) => !c.archived);
  const tops = entries.filter((c) => !c.thread_id).sort((a, b) => (b.is_default - a.is_default) || channelName(a).localeCompare(channelName(b)));
  list.replaceChildren();
  const def = tops.find((c) => c.is_default);
  for (const c of tops) {
    const li = el('li', {}, laneButton(c));
    const threads = entries.filter((t) => t.thread_id && t.parent_chat_id === c.chat_id).sort((a, b) => (b.updated || 0) - (a.updated || 0));
    if (threads.length) {
      const sub = el('ul', { class: 'threads', 'aria-label': `Threads of ${channelName(c)}` });
      for (const t of threads) sub.append(el('li', {}, laneButton(t)));
      li.append(sub);
    }
    list.append(li);
  }
  $('threads-toggle').checked = !!def?.threads_enabled;
  $('new-thread-form').hidden = !def?.threads_enabled;
  updateLaneHeader();
  updateComposer();
}

function laneButton(entry) {
  const current = state.current && laneKey(state.current.chat_id, state.current.thread_id) === laneKey(entry.chat_id, entry.thread_id);
  const button = el('button', { type: 'button', class: 'lane-btn', 'data-chat': entry.chat_id, 'data-thread': entry.thread_id || '', onclick: () => { openLane(entry.chat_id, entry.thread_id ?? null); closeNarrowNav(); } },
    el('span', { class: 'lane-name', text: channelName(entry) }),
    entry.automation ? el('span', { class: 'badge', text: 'automation' }) : null);
  if (current) button.setAttribute('aria-current', 'page');
  return button;
}

function currentEntry() {
  return state.current ? state.channels.get(laneKey(state.current.chat_id, state.current.thread_id)) : null;
}

function updateLaneHeader() {
  const entry = currentEntry();
  $('lane-title').textContent = entry ? channelName(entry) : 'Hermes';
  const note = $('lane-note');
  if (entry?.automation) {
    note.hidden = false;
    note.textContent = 'An automation channel: scheduled jobs write here, and it is read-only.';
  } else if (entry?.archived) {
    note.hidden = false;
    note.textContent = 'This channel is archived: read and search only.';
  } else {
    note.hidden = true;
  }
}

function openLane(chatId, threadId) {
  state.current = { chat_id: chatId, thread_id: threadId ?? null };
  const l = lane(chatId, threadId);
  $('log').replaceChildren(l.node);
  $('typing').textContent = l.typing ? 'Hermes is working…' : '';
  renderChannels();
  scrollToBottom();
  if (!l.loaded && state.connected) return loadHistory(l);
  return Promise.resolve();
}

async function loadHistory(l, limit = 100) {
  l.loaded = true;
  let page;
  try {
    page = await request({ type: 'history', chat_id: l.chatId, thread_id: l.threadId, limit });
  } catch (err) {
    l.loaded = false;
    showError(`Could not load the history: ${err.message}`);
    return;
  }
  // History is the transcript; frames still in flight (a running turn, open pickers)
  // stay after it.
  const live = [...l.node.children].filter((n) => n.matches('[aria-busy="true"], .picker:not([data-state]), .tool[data-status="running"]'));
  l.node.replaceChildren();
  l.items.clear();
  for (const m of page.messages || []) {
    const node = upsertMessage(l, messageIdOf(m), m.role, m.role === 'user' ? 'user' : 'reply', m.text, m.ts);
    if (m.reasoning) setReasoning(node, m.reasoning);
  }
  for (const n of live) { l.node.append(n); }
  for (const n of live) {
    const key = n.dataset.mid || (n.dataset.picker && `picker-${n.dataset.picker}`) || (n.dataset.tool && `tool-${n.dataset.tool}`);
    if (key) l.items.set(key, n);
  }
  if (isCurrent(l)) scrollToBottom();
}

// -- composer
function updateComposer() {
  const entry = currentEntry();
  const l = state.current ? lane(state.current.chat_id, state.current.thread_id) : null;
  const readOnly = !!(entry?.automation || entry?.archived);
  $('composer-text').disabled = readOnly;
  $('send-btn').disabled = readOnly;
  $('stop-btn').hidden = !l?.activeRun;
  const canAutoThread = entry?.is_default && !entry.thread_id && entry.threads_enabled;
  $('auto-thread-label').hidden = !canAutoThread;
}

const uploads = []; // {file, mediaRef?, node}

async function sendMessage() {
  const input = $('composer-text');
  const text = input.value;
  const ready = uploads.filter((u) => u.mediaRef);
  if (!text.trim() && !ready.length) return;
  if (uploads.some((u) => !u.mediaRef)) { showError('Wait for the uploads to finish.'); return; }
  const { chat_id, thread_id } = state.current;
  const clientId = newId('c-');
  const frame = { type: 'message.send', chat_id, thread_id, text, client_id: clientId, request_id: clientId };
  if (ready.length) frame.media_refs = ready.map((u) => u.mediaRef);
  const entry = currentEntry();
  if ($('auto-thread').checked && !$('auto-thread-label').hidden && !text.startsWith('/') && entry?.is_default) frame.auto_thread = true;
  // Shown at once; the gateway's echo carries the same id (u-<client_id>) and replaces it.
  const l = lane(chat_id, thread_id);
  if (!frame.auto_thread) {
    const node = upsertMessage(l, `u-${clientId}`, 'user', 'user', text);
    node.dataset.pending = 'true';
  }
  input.value = '';
  updateSlash();
  for (const u of ready) u.node.remove();
  uploads.length = 0;
  // A lost answer is retried with the same client_id: the gateway runs it once.
  for (let attempt = 0; attempt < 5; attempt += 1) {
    try {
      await whenConnected();
      const ack = await request(frame);
      if (frame.auto_thread && ack.thread_id) openLane(ack.chat_id, ack.thread_id);
      l.items.get(`u-${clientId}`)?.removeAttribute('data-pending');
      return;
    } catch (err) {
      if (err.code) {
        l.items.get(`u-${clientId}`)?.remove();
        l.items.delete(`u-${clientId}`);
        if (!frame.auto_thread && !input.value) input.value = text;
        showError(err.message);
        return;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

async function stopRun() {
  const { chat_id, thread_id } = state.current;
  const l = lane(chat_id, thread_id);
  try {
    await request({ type: 'run.cancel', chat_id, thread_id, run_id: l.activeRun || undefined });
  } catch (err) {
    if (err.code === 'unknown_type' || err.code === 'not_implemented') {
      await request({ type: 'message.send', chat_id, thread_id, text: '/stop', client_id: newId('c-') }).catch((e) => showError(e.message));
    } else {
      showError(err.message);
    }
  }
}

function updateSlash() {
  const text = $('composer-text').value;
  const list = $('slash-list');
  if (!text.startsWith('/') || text.includes(' ')) { list.hidden = true; return; }
  const matches = SLASH_COMMANDS.filter(([c]) => c.startsWith(text));
  list.replaceChildren(...matches.map(([c, help]) => el('li', {}, el('button', { type: 'button', onclick: () => { $('composer-text').value = `${c} `; list.hidden = true; $('composer-text').focus(); } },
    el('code', { text: c }), document.createTextNode(` — ${help}`)))));
  list.hidden = !matches.length;
}

// -- media: resumable chunked uploads over the WebSocket (media.md)
function base64(bytes) {
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

async function upload(file) {
  const { chat_id, thread_id } = state.current;
  const progress = el('progress', { max: file.size || 1, value: 0 });
  const status = el('span', { class: 'upload-status', text: 'hashing…' });
  const remove = el('button', { type: 'button', text: 'Remove', 'aria-label': `Remove ${file.name}` });
  const label = el('span', { text: file.name });
  const node = el('div', { class: 'upload', 'data-file': file.name }, label, progress, status, remove);
  progress.setAttribute('aria-label', `Upload of ${file.name}`);
  const item = { file, node };
  remove.onclick = () => { item.cancelled = true; node.remove(); uploads.splice(uploads.indexOf(item), 1); };
  uploads.push(item);
  $('uploads').append(node);
  const bytes = new Uint8Array(await file.arrayBuffer());
  const sha256 = await sha256Hex(bytes);
  const start = { type: 'media.upload.start', chat_id, thread_id, filename: file.name, mime: file.type || 'application/octet-stream', size: bytes.length, sha256 };
  // Every step can be cut by a dropped connection: start again with the upload_id and
  // go on from the offset the gateway has.
  for (let attempt = 0; attempt < 20 && !item.cancelled; attempt += 1) {
    try {
      await whenConnected();
      let answer = await request({ ...start, upload_id: item.uploadId });
      while (answer.type !== 'media.uploaded') {
        if (item.cancelled) return;
        item.uploadId = answer.upload_id;
        const offset = answer.offset;
        progress.value = offset;
        status.textContent = `${Math.floor((100 * offset) / (bytes.length || 1))} %`;
        const chunk = bytes.subarray(offset, offset + (answer.chunk_max || 524288));
        answer = await request({ type: 'media.upload.chunk', upload_id: item.uploadId, offset, data: base64(chunk) });
      }
      item.mediaRef = answer.media_ref;
      progress.value = progress.max;
      status.textContent = 'ready';
      node.dataset.state = 'ready';
      return;
    } catch (err) {
      if (err.code && err.code !== 'unavailable') {
        status.textContent = `failed: ${err.message}`;
        node.dataset.state = 'failed';
        uploads.splice(uploads.indexOf(item), 1);
        return;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

function addFiles(files) {
  for (const f of files) upload(f).catch((err) => showError(err.message));
}

function authFetch(path) {
  return fetch(path, { headers: { Authorization: `Bearer ${state.token}` }, cache: 'no-store', referrerPolicy: 'no-referrer' });
}

// A message re-rendered (the echo replacing the bubble shown while sending) keeps the files
// already shown in it.
function keepAttachments(old, node) {
  const from = old.querySelector('.attachments');
  const to = node.querySelector('.attachments');
  if (from && to && from !== to) to.append(...from.childNodes);
}

// Files announced before their message is shown wait for it.
function adoptPendingMedia(l, key, node) {
  const waiting = l.pendingMedia?.get(key);
  const host = node.querySelector('.attachments');
  if (!waiting || !host) return;
  l.pendingMedia.delete(key);
  for (const figure of waiting) {
    l.items.get(`media-${figure.dataset.media}`)?.remove();
    l.items.delete(`media-${figure.dataset.media}`);
    host.append(figure);
  }
}

function showMedia(l, f) {
  const mid = f.message_id;
  const host = (mid && l.items.get(mid)?.querySelector('.attachments')) || null;
  const node = el('figure', { class: 'media', 'data-media': f.media_id, 'data-kind': f.kind || '' });
  const name = f.filename || 'file';
  node.append(el('figcaption', {}, el('button', { type: 'button', class: 'link', text: `Download ${name}`, onclick: () => download(f.media_id, name) })));
  if (host) host.append(node);
  else {
    appendItem(l, `media-${f.media_id}`, el('div', { class: 'msg media-only' }, node));
    if (mid) {
      l.pendingMedia = l.pendingMedia || new Map();
      l.pendingMedia.set(mid, [...(l.pendingMedia.get(mid) || []), node]);
    }
  }
  if (f.kind === 'image' && f.inline_image) loadThumbnail(node, f.media_id);
}

async function loadThumbnail(node, mediaId) {
  const variants = state.mediaReady?.get(mediaId);
  const useThumb = !!variants?.includes('thumbnail');
  const existing = node.querySelector('img');
  if (existing && (existing.dataset.variant === 'thumbnail' || !useThumb)) return;
  try {
    const response = await authFetch(`/attachments/${mediaId}${useThumb ? '/thumbnail' : ''}`);
    if (!response.ok) return;
    const url = URL.createObjectURL(await response.blob());
    const name = node.querySelector('figcaption button')?.textContent.replace(/^Download /, '') || 'image';
    const current = node.querySelector('img');
    // The original asked for before media.ready may arrive after the thumbnail asked for
    // on it: it never replaces the thumbnail.
    if (!useThumb && current?.dataset.variant === 'thumbnail') { URL.revokeObjectURL(url); return; }
    const img = el('img', { src: url, alt: name, 'data-variant': useThumb ? 'thumbnail' : 'original', loading: 'lazy' });
    if (current) current.replaceWith(img);
    else node.prepend(img);
  } catch { /* the download button still works */ }
}

async function download(mediaId, name) {
  try {
    const response = await authFetch(`/attachments/${mediaId}`);
    if (!response.ok) { showError(`Download failed (${response.status})`); return; }
    const url = URL.createObjectURL(await response.blob());
    const a = el('a', { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (err) {
    showError(err.message);
  }
}

function onBinary() {
  // media.pull frames: this client downloads over HTTP instead (authFetch).
}

// -- search
async function search(query, scope) {
  const frame = { type: 'search', query, scope, limit: 50 };
  if (scope === 'chat' && state.current) {
    frame.chat_id = state.current.chat_id;
    if (state.current.thread_id) frame.thread_id = state.current.thread_id;
  }
  try {
    showResults(await request(frame));
  } catch (err) {
    showError(err.message);
  }
}

function snippetNodes(snippet) {
  // Matches arrive wrapped in [ ]: shown as <mark>, everything else as text.
  const out = [];
  const re = /\[([^\]]*)\]/g;
  let last = 0;
  for (let m = re.exec(snippet); m; m = re.exec(snippet)) {
    if (m.index > last) out.push(document.createTextNode(snippet.slice(last, m.index)));
    out.push(el('mark', { text: m[1] }));
    last = re.lastIndex;
  }
  if (last < snippet.length) out.push(document.createTextNode(snippet.slice(last)));
  return out;
}

function showResults(f) {
  const list = $('search-results');
  const hits = f.hits || [];
  list.replaceChildren(...hits.map((hit) => {
    const entry = state.channels.get(laneKey(hit.chat_id, hit.thread_id));
    return el('li', {}, el('button', { type: 'button', class: 'hit', 'data-mid': hit.message_id, onclick: () => jumpTo(hit) },
      el('span', { class: 'hit-where', text: `${entry ? channelName(entry) : hit.chat_id} · ${hit.role === 'user' ? 'You' : 'Hermes'}` }),
      el('span', { class: 'hit-snippet' }, ...snippetNodes(String(hit.snippet || '')))));
  }));
  if (!hits.length) list.append(el('li', { text: 'Nothing found.' }));
  $('search-panel').hidden = false;
  $('search-panel').querySelector('h2').textContent = `Results (${hits.length})`;
}

async function jumpTo(hit) {
  closeNarrowNav();
  await openLane(hit.chat_id, hit.thread_id ?? null);
  const l = lane(hit.chat_id, hit.thread_id ?? null);
  const id = transcriptIdOf(hit.message_id);
  let node = l.items.get(id);
  if (!node) {
    await loadHistory(l, 500); // older than the first page
    node = l.items.get(id);
  }
  if (!node) { showError('That message is no longer in the history.'); return; }
  for (const old of document.querySelectorAll('.msg.jumped')) old.classList.remove('jumped');
  node.classList.add('jumped');
  node.scrollIntoView({ block: 'center' });
  node.focus({ preventScroll: true });
}

// -- notifications when the tab is hidden
function notifyHidden(title, body) {
  if (!document.hidden || !state.notify || !('Notification' in window) || Notification.permission !== 'granted') return;
  try {
    new Notification(title, { body: String(body || '').slice(0, 140), tag: 'hermes' });
  } catch { /* some platforms only allow notifications from a service worker */ }
}

function showError(message) {
  const log = $('log');
  const node = el('p', { class: 'notice error', role: 'alert', text: message });
  log.append(node);
  setTimeout(() => node.remove(), 8000);
}

// -- screens
function showPair(reason) {
  $('app').hidden = true;
  $('pair-screen').hidden = false;
  $('pair-reason').textContent = reason || 'Open the web link that hdgctl pair prints, or paste the pairing URI.';
  $('pair-screen').dataset.reason = reason ? 'refused' : 'new';
  $('pair-input').focus();
}

function startApp() {
  $('pair-screen').hidden = true;
  $('app').hidden = false;
  state.stopped = false;
  state.attempts = 0;
  state.device = deviceId();
  connect();
}

function closeNarrowNav() {
  document.body.classList.remove('nav-open');
  $('nav-toggle').setAttribute('aria-expanded', 'false');
}

function wire() {
  $('pair-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const token = tokenFrom($('pair-input').value);
    if (!token) { $('pair-reason').textContent = 'That is not a pairing link, URI or token.'; return; }
    $('pair-input').value = '';
    localStorage.setItem(TOKEN_KEY, token);
    state.token = token;
    startApp();
  });
  $('unpair-btn').addEventListener('click', () => {
    localStorage.removeItem(TOKEN_KEY);
    state.stopped = true;
    state.ws?.close();
    showPair('Unpaired. Open the pairing link again to reconnect.');
  });
  $('notify-btn').addEventListener('click', async () => {
    if (!('Notification' in window)) { showError('This browser has no notifications.'); return; }
    const permission = await Notification.requestPermission();
    state.notify = permission === 'granted';
    $('notify-btn').setAttribute('aria-pressed', String(state.notify));
  });
  $('nav-toggle').addEventListener('click', () => {
    const open = !document.body.classList.contains('nav-open');
    document.body.classList.toggle('nav-open', open);
    $('nav-toggle').setAttribute('aria-expanded', String(open));
  });
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); sendMessage(); });
  $('composer-text').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); sendMessage(); }
    if (e.key === 'Escape') $('slash-list').hidden = true;
  });
  $('composer-text').addEventListener('input', updateSlash);
  $('composer-text').addEventListener('paste', (e) => {
    const files = [...(e.clipboardData?.files || [])];
    if (files.length) { e.preventDefault(); addFiles(files); }
  });
  const chat = $('chat');
  chat.addEventListener('dragover', (e) => { if (e.dataTransfer?.types?.includes('Files')) { e.preventDefault(); chat.classList.add('drop'); } });
  chat.addEventListener('dragleave', () => chat.classList.remove('drop'));
  chat.addEventListener('drop', (e) => {
    chat.classList.remove('drop');
    if (e.dataTransfer?.files?.length) { e.preventDefault(); addFiles([...e.dataTransfer.files]); }
  });
  $('file-input').addEventListener('change', (e) => { addFiles([...e.target.files]); e.target.value = ''; });
  $('stop-btn').addEventListener('click', stopRun);
  $('search-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const q = $('search-input').value.trim();
    if (q) search(q, $('search-scope').value);
  });
  $('search-close').addEventListener('click', () => { $('search-panel').hidden = true; $('search-input').focus(); });
  $('threads-toggle').addEventListener('change', (e) => {
    const def = [...state.channels.values()].find((c) => c.is_default);
    if (def) request({ type: 'channel.set_threads', chat_id: def.chat_id, on: e.target.checked }).catch((err) => showError(err.message));
  });
  $('new-channel-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const name = $('new-channel-name').value.trim();
    if (!name) return;
    request({ type: 'channel.create', kind: 'channel', name }).then((r) => {
      $('new-channel-name').value = '';
      putChannel(r.entry);
      openLane(r.entry.chat_id, null);
    }).catch((err) => showError(err.message));
  });
  $('new-thread-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const name = $('new-thread-name').value.trim();
    const def = [...state.channels.values()].find((c) => c.is_default);
    if (!name || !def) return;
    request({ type: 'channel.create', kind: 'thread', name, parent_chat_id: def.chat_id }).then((r) => {
      $('new-thread-name').value = '';
      putChannel(r.entry);
      openLane(r.entry.chat_id, r.entry.thread_id);
    }).catch((err) => showError(err.message));
  });
  document.addEventListener('visibilitychange', () => { if (!document.hidden) scheduleAck(); });
  window.addEventListener('online', () => { if (!state.ws && !state.stopped) { state.attempts = 0; connect(); } });
}

function main() {
  wire();
  const fromLink = location.hash ? tokenFrom(location.hash.slice(1)) : null;
  if (fromLink) {
    localStorage.setItem(TOKEN_KEY, fromLink);
    // The token leaves the address bar (and the tab's history) at once.
    history.replaceState(null, '', location.pathname + location.search);
  }
  state.token = localStorage.getItem(TOKEN_KEY);
  if (!state.token) showPair();
  else startApp();
}

// Exposed for tests and debugging: read-only views of the connection.
window.hermesWeb = { state, safeHref };
main();
