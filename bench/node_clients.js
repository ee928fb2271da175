// The Node.js clients of bench/amqp10_throughput.py's `--clients node` runs: rhea (AMQP 1.0)
// and amqplib (AMQP 0-9-1), two clients of about the same weight from one runtime, so that
// a run compares the broker's two protocols rather than two client libraries.
//
// Usage: node node_clients.js ROLE PROTO HOST PORT ADDRESS IDX COUNT SIZE WINDOW
//   ROLE producer | consumer; PROTO 1.0 | 0-9-1; ADDRESS a 1.0 address or a queue name;
//   WINDOW: the producer's most unsettled (unconfirmed) messages, the consumer's credit
//   (prefetch).
// Prints "ready" once it can start (a consumer: its link or consumer is attached); a
// producer then waits for one line on stdin ("go"). At the end it prints one JSON line:
// producer {"accepted", "refused", "latencies_ms", "cpu_s"}; consumer {"received",
// "duplicates", "last_at" (seconds since the epoch), "cpu_s"}. Bodies start with
// (producer id: uint32, sequence number: uint64), big-endian, as bench/throughput.py's.
// Exits 1 with one line on stderr on any error. Needs NODE_PATH to hold rhea and amqplib
// (tests/compat/node/node_modules, installed by deploy/node_lock_install.py).
'use strict';

const [role, proto, host, portText, address, idxText, countText, sizeText, windowText] =
  process.argv.slice(2);
const port = Number(portText);
const idx = Number(idxText);
const count = Number(countText);
const size = Number(sizeText);
const window = Number(windowText);
const cpu0 = process.cpuUsage();

function fail(text) {
  process.stderr.write(`${role} ${proto}: ${text}\n`);
  process.exit(1);
}

function report(fields) {
  const cpu = process.cpuUsage(cpu0);
  fields.cpu_s = (cpu.user + cpu.system) / 1e6;
  process.stdout.write(`${JSON.stringify(fields)}\n`);
}

function body(seq) {
  const buf = Buffer.alloc(size, 0x78);
  buf.writeUInt32BE(idx, 0);
  buf.writeBigUInt64BE(BigInt(seq), 4);
  return buf;
}

function keyOf(buf) {
  return `${buf.readUInt32BE(0)}:${buf.readBigUInt64BE(4)}`;
}

function onGo(start) {
  let text = '';
  process.stdin.on('data', (chunk) => {
    text += chunk;
    if (text.includes('\n')) {
      process.stdin.pause();
      start();
    }
  });
}

// -- consumers: count every (producer, sequence) once ------------------------------------
const seen = new Set();
let duplicates = 0;
let lastAt = 0;

function received(buf) {
  const key = keyOf(buf);
  if (seen.has(key)) duplicates += 1;
  seen.add(key);
  lastAt = Date.now() / 1000;
  return seen.size === count;
}

function consumerDone() {
  report({ received: seen.size, duplicates, last_at: lastAt });
}

// -- producers: a window of unsettled messages, each timed to its settlement -------------
let sent = 0;
let accepted = 0;
let refused = 0;
const latencies = [];

function producerDone() {
  report({ accepted, refused, latencies_ms: latencies });
}

// -- AMQP 1.0: rhea ----------------------------------------------------------------------
function rheaClient() {
  const rhea = require('rhea');
  const container = rhea.create_container({ id: `bench-${role}-${idx}` });
  const options = { host, port, username: 'guest', password: 'guest', reconnect: false };
  container.on('error', (context) => fail(`error: ${context.error || context}`));
  container.on('connection_error', (context) =>
    fail(`connection error: ${JSON.stringify(context.connection.error)}`));
  container.on('disconnected', (context) => {
    if (!finished) fail(`disconnected: ${context.error}`);
  });
  let finished = false;
  if (role === 'consumer') {
    container.on('receiver_open', () => process.stdout.write('ready\n'));
    container.on('message', (context) => {
      if (received(context.message.body.content) && !finished) {
        finished = true;
        consumerDone();
        context.connection.close();
      }
    });
    const connection = container.connect(options);
    connection.open_receiver({ source: address, credit_window: window, autoaccept: true });
    return;
  }
  const started = new Map();
  function pump(sender) {
    while (sent < count && sent - accepted - refused < window && sender.sendable()) {
      const delivery = sender.send({ body: rhea.message.data_section(body(sent)) });
      started.set(delivery, process.hrtime.bigint());
      sent += 1;
    }
  }
  function settled(context, ok) {
    const t0 = started.get(context.delivery);
    if (t0 !== undefined) {
      started.delete(context.delivery);
      latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    if (ok) accepted += 1;
    else refused += 1;
    if (accepted + refused === count) {
      finished = true;
      producerDone();
      context.connection.close();
    } else {
      pump(context.sender);
    }
  }
  container.on('sendable', (context) => pump(context.sender));
  container.on('accepted', (context) => settled(context, true));
  container.on('released', (context) => settled(context, false));
  container.on('rejected', (context) => settled(context, false));
  container.on('modified', (context) => settled(context, false));
  process.stdout.write('ready\n');
  onGo(() => container.connect(options).open_sender(address));
}

// -- AMQP 0-9-1: amqplib -----------------------------------------------------------------
async function amqplibClient() {
  const amqp = require('amqplib');
  const conn = await amqp.connect(`amqp://guest:guest@${host}:${port}/%2F`);
  conn.on('error', (err) => fail(`connection error: ${err}`));
  if (role === 'consumer') {
    const ch = await conn.createChannel();
    await ch.prefetch(window);
    const every = Math.max(1, Math.floor(window / 4));
    let unacked = 0;
    let last = null;
    let finished = false;
    // manual multiple acks every prefetch/4 messages and every 50 ms, as bench/throughput.py's
    const timer = setInterval(() => {
      if (last !== null) ch.ack(last, true);
      last = null;
      unacked = 0;
    }, 50);
    await ch.consume(address, (msg) => {
      if (msg === null) fail('consumer cancelled by the broker');
      const done = received(msg.content);
      unacked += 1;
      last = msg;
      if (unacked >= every || done) {
        ch.ack(msg, true);
        last = null;
        unacked = 0;
      }
      if (done && !finished) {
        finished = true;
        clearInterval(timer);
        consumerDone();
        conn.close().catch(() => {});
      }
    });
    process.stdout.write('ready\n');
    return;
  }
  const ch = await conn.createConfirmChannel();
  process.stdout.write('ready\n');
  onGo(() => {
    function pump() {
      while (sent < count && sent - accepted - refused < window) {
        const t0 = process.hrtime.bigint();
        sent += 1;
        ch.publish('', address, body(sent - 1), {}, (err) => {
          latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
          if (err) refused += 1;
          else accepted += 1;
          if (accepted + refused === count) {
            producerDone();
            conn.close().catch(() => {});
          } else {
            pump();
          }
        });
      }
    }
    pump();
  });
}

if (proto === '1.0') rheaClient();
else amqplibClient().catch((err) => fail(`${err}`));
