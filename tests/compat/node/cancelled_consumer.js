// tests/compat/test_amqplib.py: amqplib's "cancelled consumer" (its channel_api.test.js)
// consumes from a durable queue and deletes it; the broker's basic.cancel ends the consumer
// and the test, which closes the channel at once. amqplib drops every frame after its
// channel.close but close-ok, so the delete-ok must come with the cancel, not after it.
// Does it ROUNDS times (the cancel may overtake a late delete-ok or not); prints one JSON
// line: what each deleteQueue resolved to, or its error.
'use strict';
const amqp = require('amqplib');

async function round(conn, n) {
  const ch = await conn.createChannel();
  const queue = `node.cancelled.${process.pid}-${n}`;
  await ch.assertQueue(queue, { durable: true });
  let deleted;
  await new Promise((resolve, reject) => {
    ch.consume(queue, (msg) => (msg === null ? resolve() : reject(new Error('a message'))))
      .then(() => {
        deleted = ch.deleteQueue(queue);
      })
      .catch(reject);
  });
  const closed = ch.close(); // on the cancel, as the suite's withChannel does
  let result;
  try {
    result = await deleted;
  } catch (err) {
    result = String(err);
  }
  await closed;
  return result;
}

async function main(url, rounds) {
  const conn = await amqp.connect(url);
  const results = [];
  for (let n = 0; n < rounds; n++) results.push(await round(conn, n));
  await conn.close();
  console.log(JSON.stringify(results));
}

main(process.argv[2], Number(process.argv[3])).catch((err) => {
  console.error(err);
  process.exit(1);
});
