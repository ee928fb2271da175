// rhea (node's AMQP 1.0 client) against qpidd: a sender and a receiver on one queue.
// Usage: node rhea_client.js HOST PORT QUEUE COUNT
// Sends COUNT durable messages unsettled (each counted once the broker's accepted
// disposition came), receives COUNT and accepts each, then prints one JSON line:
// {"accepted": n, "received": [{"body", "colour", "durable", "delivery_count"}...],
//  "product": the broker's open properties' product}.
'use strict';
const rhea = require('rhea');

const [host, port, queue, countText] = process.argv.slice(2);
const count = Number(countText);
const container = rhea.create_container({ id: 'qpidd-rhea-test' });
let accepted = 0;
let sent = 0;
const received = [];
let product = null;

const timer = setTimeout(() => {
  console.error(`timed out: accepted ${accepted}, received ${received.length}`);
  process.exit(1);
}, 30000);

container.on('connection_open', (context) => {
  const props = context.connection.remote.open.properties || {};
  product = props.product || null;
  context.connection.open_receiver({ source: queue, credit_window: 10, autoaccept: false });
  context.connection.open_sender(queue);
});

container.on('sendable', (context) => {
  while (sent < count && context.sender.sendable()) {
    context.sender.send({
      body: `r${sent}`,
      durable: true,
      application_properties: { colour: sent % 2 ? 'red' : 'blue' },
    });
    sent += 1;
  }
});

container.on('accepted', () => {
  accepted += 1;
});

container.on('message', (context) => {
  const m = context.message;
  received.push({
    body: m.body,
    colour: (m.application_properties || {}).colour,
    durable: Boolean(m.durable),
    delivery_count: m.delivery_count || 0,
  });
  context.delivery.accept();
  if (received.length === count && accepted === count) finish(context.connection);
});

container.on('settled', (context) => {
  if (received.length === count && accepted === count) finish(context.connection);
});

let finished = false;
function finish(connection) {
  if (finished) return;
  finished = true;
  clearTimeout(timer);
  console.log(JSON.stringify({ accepted, received, product }));
  connection.close();
}

container.on('error', (context) => {
  console.error(`error: ${context.error}`);
  process.exit(1);
});
container.on('connection_error', (context) => {
  console.error(`connection error: ${JSON.stringify(context.connection.error)}`);
  process.exit(1);
});
container.on('disconnected', (context) => {
  if (!finished) {
    console.error(`disconnected: ${context.error}`);
    process.exit(1);
  }
});

container.connect({
  host,
  port: Number(port),
  username: 'guest',
  password: 'guest',
  reconnect: false,
});
