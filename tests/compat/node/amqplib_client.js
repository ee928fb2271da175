// The Node.js amqplib client of tests/compat/test_amqplib.py: over a confirm channel it
// declares an exchange bound to an exchange, a queue, publishes COUNT messages waiting for
// every confirm, then consumes and acknowledges them; an RPC through direct reply-to.
// Prints one JSON line with what it saw; exits 1 with the error otherwise.
'use strict';
const amqp = require('amqplib');

async function main(url, count) {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  const tag = `${process.pid}-${Date.now()}`;
  const front = `node.front.${tag}`, back = `node.back.${tag}`, queue = `node.q.${tag}`;
  await ch.assertExchange(front, 'topic', { autoDelete: false });
  await ch.assertExchange(back, 'fanout', { autoDelete: false });
  await ch.bindExchange(back, front, 'orders.#');
  await ch.assertQueue(queue, { exclusive: true, arguments: { 'x-max-priority': 5 } });
  await ch.bindQueue(queue, back, '');
  for (let i = 0; i < count; i++) {
    ch.publish(front, 'orders.eu', Buffer.from(`m${i}`), { persistent: true, priority: i % 2 });
  }
  await ch.waitForConfirms();
  const received = [];
  await new Promise((resolve, reject) => {
    ch.consume(queue, (msg) => {
      if (msg === null) return reject(new Error('consumer cancelled by the broker'));
      received.push(msg.content.toString());
      ch.ack(msg);
      if (received.length === count) resolve();
    }).catch(reject);
  });
  // direct reply-to RPC: a server on one channel, the client on another
  const server = await conn.createChannel();
  const requests = `node.rpc.${tag}`;
  await server.assertQueue(requests, { exclusive: true });
  await server.consume(requests, (msg) => {
    server.sendToQueue(msg.properties.replyTo, Buffer.from(msg.content.toString().toUpperCase()),
      { correlationId: msg.properties.correlationId });
    server.ack(msg);
  });
  const client = await conn.createChannel();
  const reply = await new Promise((resolve, reject) => {
    client.consume('amq.rabbitmq.reply-to', (msg) => resolve(msg.content.toString()),
      { noAck: true })
      .then(() => client.sendToQueue(requests, Buffer.from('ping'),
        { replyTo: 'amq.rabbitmq.reply-to', correlationId: '1' }))
      .catch(reject);
  });
  await ch.deleteExchange(front);
  await ch.deleteExchange(back);
  await conn.close();
  return { received, reply, server: conn.connection.serverProperties.product };
}

main(process.argv[2], Number(process.argv[3] || 10)).then(
  (result) => { console.log(JSON.stringify(result)); },
  (err) => { console.error(String(err && err.stack || err)); process.exit(1); },
);
