// examples/clients/node/client.js: the node-pg client of the clients
// example (../README.md); the same steps as ../client_psycopg2.py, awaited.
// Peeks once; proves on a bucket of its own that sleeping
// retry_after_seconds is enough; then, with the other clients, loops on
// tb_try on the shared bucket for EXAMPLE_SECONDS, sleeping
// retry_after_seconds after each denial and waiting in the server
// (tb_acquire_wait) every tenth call.  Prints one JSON line.  Connects with
// libpq's PGHOST, PGPORT, PGUSER and PGDATABASE, which node-pg reads too.
'use strict';
const { Client } = require('pg');

const NAME = 'node-pg';
const env = process.env;
const BUCKET = env.EXAMPLE_BUCKET || 'shared';
const SECONDS = Number(env.EXAMPLE_SECONDS || 5);
const COST = Number(env.EXAMPLE_COST || 1);
const RATE = Number(env.EXAMPLE_RATE || 10);        // to judge retry_after
const BARRIER = Number(env.EXAMPLE_BARRIER || 0);   // advisory lock key; 0: none
const SOLO_ROUNDS = 5;
const WAIT_TIMEOUT = 1.0;                           // seconds

// setTimeout counts whole milliseconds from the event loop's cached clock,
// and can fire before the delay has passed: round up and add one, or a
// retry can come before the token is there
const sleep = (seconds) => new Promise((done) => setTimeout(done, Math.ceil(seconds * 1000) + 1));

async function main() {
  const db = new Client();
  await db.connect();
  const r = {
    client: NAME, grants: 0, denials: 0, retried: 0, retried_granted: 0,
    waits: 0, waits_granted: 0, first_call: null, last_grant: null,
    retry_after_min: null, retry_after_max: null, retry_after_usable: true,
    solo_retried: 0, solo_retried_granted: 0,
  };

  // tb_try once; on a denial, judge retry_after_seconds and sleep it.
  // Returns [granted, when the server answered, in epoch seconds].
  async function tryOnce(bucket) {
    // extract(epoch ...) is numeric, which node-pg hands over as a string:
    // cast to float8, which it parses into a number.  The interval column
    // retry_after would come as an object ({ milliseconds: 42 }), not a number.
    const { rows: [row] } = await db.query(
      'SELECT t.granted, t.retry_after_seconds AS wait,'
      + ' extract(epoch FROM clock_timestamp())::float8 AS at'   // after the decision
      + ' FROM tb_try($1, $2) AS t', [bucket, COST]);
    if (!row.granted) {
      const wait = row.wait;
      const usable = typeof wait === 'number' && wait > 0 && wait <= COST / RATE + 0.001;
      r.retry_after_usable = r.retry_after_usable && usable;
      r.retry_after_min = Math.min(wait, r.retry_after_min ?? wait);
      r.retry_after_max = Math.max(wait, r.retry_after_max ?? wait);
      await sleep(wait);
    }
    return [row.granted, row.at];
  }

  const peek = await db.query('SELECT granted, remaining FROM tb_peek($1, $2)', [BUCKET, COST]);
  r.peek = peek.rows[0];

  // alone on solo:node-pg (made from the template solo:*), a retry after
  // sleeping retry_after_seconds must be granted, every time
  while (r.solo_retried < SOLO_ROUNDS) {
    if (!(await tryOnce(`solo:${NAME}`))[0]) {
      r.solo_retried += 1;
      r.solo_retried_granted += (await tryOnce(`solo:${NAME}`))[0] ? 1 : 0;
    }
  }

  if (BARRIER) {  // start with the others: run.sh holds this lock until all wait
    await db.query('SELECT pg_advisory_xact_lock_shared($1)', [BARRIER]);
  }
  const start = await db.query('SELECT extract(epoch FROM clock_timestamp())::float8 AS at');
  r.first_call = start.rows[0].at;
  let afterDenial = false;
  let calls = 0;
  const end = process.hrtime.bigint() + BigInt(Math.round(SECONDS * 1e9));
  while (process.hrtime.bigint() < end) {
    calls += 1;
    let granted;
    let at;
    if (calls % 10 === 5) {
      // node-pg sends every parameter as untyped text; make_interval makes
      // the seconds' meaning explicit rather than relying on '1' as an interval
      const { rows: [row] } = await db.query(
        'SELECT ok, extract(epoch FROM clock_timestamp())::float8 AS at'
        + ' FROM tb_acquire_wait($1, $2, make_interval(secs => $3)) AS ok',
        [BUCKET, COST, WAIT_TIMEOUT]);
      [granted, at] = [row.ok, row.at];
      r.waits += 1;
      r.waits_granted += granted ? 1 : 0;
      afterDenial = false;
    } else {
      [granted, at] = await tryOnce(BUCKET);
      if (afterDenial) {
        r.retried += 1;
        r.retried_granted += granted ? 1 : 0;
      }
      afterDenial = !granted;
      r.denials += granted ? 0 : 1;
    }
    if (granted) {
      r.grants += 1;
      r.last_grant = at;
    }
  }
  await db.end();
  console.log(JSON.stringify(r));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
