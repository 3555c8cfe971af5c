// The RocketMQ 5 Node.js SDK (rocketmq-client-nodejs, unmodified, from npm) against the gateway's
// RocketMQ front end. Usage: node rocketmq_client.js SCENARIO ENDPOINT TOPIC GROUP
// Prints one JSON line per observation and `{"done": true}` at the end; exits 1 on an error.
'use strict';

const {
  Producer, SimpleConsumer, PushConsumer, ConsumeResult, FilterExpression,
} = require('rocketmq-client-nodejs');

const [scenario, endpoints, topic, group] = process.argv.slice(2);
const quiet = { info() {}, warn() {}, error() {}, debug() {}, close() {} };
const base = { endpoints, namespace: '', logger: quiet, requestTimeout: 10000 };
const WAIT_MS = 60000;

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function view(m) {
  return {
    id: m.messageId,
    topic: m.topic,
    body: m.body.toString('utf8'),
    tag: m.tag || '',
    keys: m.keys,
    group: m.messageGroup || '',
    attempt: m.deliveryAttempt,
    corrupted: m.corrupted === true,
    props: Object.fromEntries(m.properties),
    born: m.bornTimestamp ? m.bornTimestamp.getTime() : 0,
    at: Date.now(),
  };
}

function waitFor(check, what) {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const timer = setInterval(() => {
      if (check()) {
        clearInterval(timer);
        resolve();
      } else if (Date.now() - started > WAIT_MS) {
        clearInterval(timer);
        reject(new Error(`timed out waiting for ${what}`));
      }
    }, 20);
  });
}

// A push consumer of another group that reads the group's dead-letter queue.
function deadLetterReader(onDead) {
  return new PushConsumer({ ...base, consumerGroup: `${group}-dlq-reader`,
    subscriptions: new Map([[`%DLQ%${group}`, FilterExpression.SUB_ALL]]),
    messageListener: {
      consume(m) {
        onDead(m);
        return ConsumeResult.SUCCESS;
      },
    } });
}

async function producer() {
  const p = new Producer({ ...base, topic });
  await p.startup();
  return p;
}

// Every kind of send a producer makes, taken by a simple consumer: body, tag, keys and
// properties as sent, digests that check (not `corrupted`), one changed invisible duration
// that brings the message again with attempt 2, then acks.
async function simple() {
  const p = await producer();
  const sent = [];
  sent.push((await p.send({ topic, body: Buffer.from('plain'), tag: 'TagA', keys: ['k1', 'k2'],
    properties: new Map([['colour', 'blue'], ['size', 'L']]) })).messageId);
  sent.push((await p.send({ topic, body: Buffer.from('delayed'), tag: 'TagB',
    delay: 1000 })).messageId);
  sent.push((await p.send({ topic, body: Buffer.from('grouped'), messageGroup: 'g1' })).messageId);
  emit({ sent });
  const c = new SimpleConsumer({ ...base, consumerGroup: group,
    subscriptions: new Map([[topic, FilterExpression.SUB_ALL]]), awaitDuration: 3000 });
  await c.startup();
  const seen = new Map();
  let extended = false;
  const started = Date.now();
  while (seen.size < sent.length && Date.now() - started < WAIT_MS) {
    for (const m of await c.receive(16, 30000)) {
      emit({ received: view(m) });
      if (!extended) {
        extended = true;
        await c.changeInvisibleDuration(m, 10000);  // the least; 100 ms at time scale 0.01
        continue;
      }
      seen.set(m.messageId, m);
      await c.ack(m);
    }
  }
  await Promise.all([c.shutdown(), p.shutdown()]);
}

// A push listener that fails each message twice, then succeeds; a tag filter on a second
// consumer group.
async function push() {
  const tries = new Map();
  let acked = 0;
  const c = new PushConsumer({ ...base, consumerGroup: group,
    subscriptions: new Map([[topic, new FilterExpression('TagA||TagB')]]),
    messageListener: {
      consume(m) {
        emit({ delivered: view(m) });
        const n = (tries.get(m.messageId) || 0) + 1;
        tries.set(m.messageId, n);
        if (m.body.toString('utf8').startsWith('fail') && n < 3) {
          return ConsumeResult.FAILURE;
        }
        acked += 1;
        return ConsumeResult.SUCCESS;
      },
    } });
  await c.startup();
  const p = await producer();
  for (const [body, tag] of [['fail-1', 'TagA'], ['skip', 'TagC'], ['ok', 'TagB']]) {
    emit({ sent: (await p.send({ topic, body: Buffer.from(body), tag })).messageId, body });
  }
  await waitFor(() => acked >= 2, 'two acked messages');
  await Promise.all([c.shutdown(), p.shutdown()]);
}

// A listener that always fails: every delivery, then the dead letter read from %DLQ%group.
async function deadLetter() {
  let dead = null;
  const failing = new PushConsumer({ ...base, consumerGroup: group,
    subscriptions: new Map([[topic, FilterExpression.SUB_ALL]]),
    messageListener: {
      consume(m) {
        emit({ delivered: view(m) });
        return ConsumeResult.FAILURE;
      },
    } });
  const reader = deadLetterReader((m) => { dead = view(m); });
  await failing.startup();
  await reader.startup();
  const p = await producer();
  emit({ sent: (await p.send({ topic, body: Buffer.from('bad-forever') })).messageId });
  await waitFor(() => dead !== null, 'the dead letter');
  emit({ dead });
  await Promise.all([failing.shutdown(), reader.shutdown(), p.shutdown()]);
}

// A FIFO group: each message group's messages in order. The SDK retries a FIFO message on its
// own, by the retry policy in the settings it gets; this SDK knows only the exponential kind, so
// with the customized table a proxy (and the gateway) sends, it forwards a failed message to the
// dead-letter queue at once (ForwardMessageToDeadLetterQueue) and goes on with the next.
async function fifo() {
  const order = [];
  let dead = null;
  const c = new PushConsumer({ ...base, consumerGroup: group,
    subscriptions: new Map([[topic, FilterExpression.SUB_ALL]]),
    messageListener: {
      consume(m) {
        emit({ delivered: view(m) });
        order.push(m.body.toString('utf8'));
        return m.body.toString('utf8') === 'a2' ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
      },
    } });
  const reader = deadLetterReader((m) => { dead = view(m); });
  await c.startup();
  await reader.startup();
  emit({ fifo: c.getPushConsumerSettings().isFifo() });
  const p = await producer();
  for (const body of ['a1', 'b1', 'a2', 'a3', 'b2', 'a4']) {
    emit({ sent: (await p.send({ topic, body: Buffer.from(body),
      messageGroup: body[0] })).messageId, body });
  }
  await waitFor(() => order.length >= 6 && dead !== null, 'six consumed and one dead letter');
  emit({ dead });
  await Promise.all([c.shutdown(), reader.shutdown(), p.shutdown()]);
}

const scenarios = { simple, push, fifo, 'dead-letter': deadLetter };

scenarios[scenario]().then(() => {
  emit({ done: true });
  process.exit(0);
}, (err) => {
  emit({ error: String(err && err.stack ? err.stack : err) });
  process.exit(1);
});
