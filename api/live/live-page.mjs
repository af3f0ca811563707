/**
 * The live view's page script: opens GET /live/events (an EventSource on the daemon that served
 * the page), draws each frame (live-graph.mjs, live-tables.mjs beside it), and pauses by closing
 * the stream (the daemon stops sampling when no page listens) and resumes by opening it again.
 * Runs in the browser; read-only: it sends nothing but the stream's GET.
 */
import { GraphView } from './live-graph.mjs';
import { QpTable, errorsTable, interfacesTable, nodesTable } from './live-tables.mjs';

const $ = (id) => document.getElementById(id);

const graph = new GraphView($('graph'));
const qps = new QpTable($('qps'));
let source = null;
let last = null;
/** The thread shown: its index, -1 for the total. */
let chosen = null;
let frames = 0;

function status(text, cls) {
  const s = $('status');
  s.textContent = text;
  s.className = `status ${cls}`;
}

function threadTabs(threads) {
  const nav = $('threads');
  const names = threads.map((t) => `${t.index}:${t.name}`).join(',');
  if (nav.dataset.threads !== names) {
    nav.dataset.threads = names;
    nav.replaceChildren(
      ...threads.map((t) => {
        const b = document.createElement('button');
        b.type = 'button';
        b.textContent = t.index < 0 ? 'all threads' : `thread ${t.index} ${t.name}`;
        b.dataset.thread = String(t.index);
        b.addEventListener('click', () => {
          chosen = t.index;
          if (last) draw(last);
        });
        return b;
      }),
    );
  }
  for (const b of nav.children) b.classList.toggle('on', Number(b.dataset.thread) === chosen);
}

function draw(frame) {
  // The total when there are several threads, else the one there is.
  if (chosen === null || !frame.threads.some((t) => t.index === chosen)) chosen = frame.threads.at(-1).index;
  threadTabs(frame.threads);
  const thread = frame.threads.find((t) => t.index === chosen);
  graph.update(thread.nodes);
  nodesTable($('nodes'), thread.nodes);
  interfacesTable($('interfaces'), frame.interfaces);
  errorsTable($('errors'), frame.errors);
  $('clock').textContent = `${new Date(frame.time).toLocaleTimeString()} (${frames} frames)`;
}

function open() {
  status('connecting', 'connecting');
  source = new EventSource('/live/events');
  source.addEventListener('open', () => status('live', 'live'));
  source.addEventListener('error', () => status('reconnecting', 'lost'));
  source.addEventListener('frame', (e) => {
    const frame = JSON.parse(e.data);
    frames++;
    last = frame;
    qps.update(frame.qps);
    draw(frame);
    document.body.dataset.frames = String(frames);
  });
}

$('pause').addEventListener('click', () => {
  if (source) {
    source.close();
    source = null;
    status('paused', 'paused');
    $('pause').textContent = 'Resume';
  } else {
    open();
    $('pause').textContent = 'Pause';
  }
});

open();
