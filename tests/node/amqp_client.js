// An amqplib program, as an application would write it: publish with confirms, consume,
// nack the first delivery (requeue) and ack the redelivery. Prints what it saw as JSON.
// Usage: node amqp_client.js AMQP_URL QUEUE
"use strict";
const amqp = require("amqplib");

async function main() {
  const [url, queue] = process.argv.slice(2);
  const connection = await amqp.connect(url);
  const publisher = await connection.createConfirmChannel();
  await publisher.assertQueue(queue, { durable: true, arguments: { "x-retry-interval": 10 } });
  await new Promise((resolve, reject) =>
    publisher.sendToQueue(queue, Buffer.from("from-node"),
      { persistent: true, contentType: "text/plain", headers: { lang: "js" } },
      (err) => (err ? reject(err) : resolve())));
  const consumer = await connection.createChannel();
  await consumer.prefetch(1);
  const seen = [];
  const start = Date.now();
  await new Promise((resolve) => {
    consumer.consume(queue, (msg) => {
      seen.push({
        body: msg.content.toString(),
        redelivered: msg.fields.redelivered,
        contentType: msg.properties.contentType,
        headers: msg.properties.headers,
        atMs: Date.now() - start,
      });
      if (seen.length === 1) {
        consumer.nack(msg, false, true);
      } else {
        consumer.ack(msg);
        resolve();
      }
    });
  });
  await consumer.close();
  await publisher.close();
  await connection.close();
  process.stdout.write(JSON.stringify(seen) + "\n");
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack || err) + "\n");
  process.exit(1);
});
