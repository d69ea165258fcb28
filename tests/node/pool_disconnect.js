// The logic of node mysql2's test-pool-disconnect, against ringgate: a pool of
// five connections runs ten queries; then, one at a time, each pool connection is killed with
// `kill <its threadId>; select sleep(0.05)` (a multi-statement, from another connection) and the
// next kill starts only when the killed connection's fatal 'error' event has arrived. Through a
// proxy that does not map its connection ids to backend threads the first KILL fails (1094);
// through one that does not notice an idle backend being killed, the chain stops after one.
//
// Usage: node pool_disconnect.js  (env: PROXY_PORT, APP_USER, APP_PASSWORD, STRICT_ORDER). Prints one JSON
// line; exits 0 when all five connections were killed and the process ended on its own.
'use strict';

const mysql = require('mysql2');

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};

const cfg = {
  host: '127.0.0.1',
  port: Number(env('PROXY_PORT')),
  user: env('APP_USER'),
  password: env('APP_PASSWORD'),
};
const connectionLimit = 5;
const pool = mysql.createPool({ ...cfg, connectionLimit });
const conn = mysql.createConnection({ ...cfg, multipleStatements: true });

const strictOrder = process.env.STRICT_ORDER === '1';
const numSelectToPerform = 10;
const tids = [];
const errors = [];
let numSelects = 0;
let killCount = 0;

function report(ok, extra) {
  console.log(JSON.stringify({ ok, numSelects, killCount, tids, errors, ...extra }));
}

// A chain that stops leaves the process alive: fail instead of hanging the suite.
const watchdog = setTimeout(() => {
  report(false, { hang: 'the kill chain stopped: a killed idle connection got no error event' });
  process.exit(2);
}, 20000);
watchdog.unref();

function kill() {
  setTimeout(() => {
    const id = tids.shift();
    if (typeof id !== 'undefined') {
      // STRICT_ORDER: rc.9's own form, a plain `kill ?` whose callback finds the killed
      // connection gone already, as MariaDB answers a KILL after its victim has ended.
      const sql = strictOrder ? 'kill ?' : 'kill ?; select sleep(0.05)';
      conn.query(sql, [id], (err) => {
        if (err) errors.push(`kill ${id}: ${err.code} ${err.message}`);
        else killCount++;
        if (strictOrder && pool._allConnections.length !== tids.length) {
          errors.push(`kill ${id} answered before its connection ended`);
        }
      });
    } else {
      conn.end();
      pool.end();
    }
  }, 5);
}

pool.on('connection', (c) => {
  tids.push(c.threadId);
  c.on('error', () => setTimeout(kill, 5));
});

for (let i = 0; i < numSelectToPerform; i++) {
  pool.query('select 1 as value', (err, rows) => {
    numSelects++;
    if (err) errors.push(`select: ${err.code} ${err.message}`);
    else if (rows[0].value !== 1) errors.push(`select returned ${JSON.stringify(rows)}`);
    if (numSelects === numSelectToPerform) kill();
  });
}

process.on('exit', (code) => {
  if (code !== 0) return;
  const ok = numSelects === numSelectToPerform && killCount === connectionLimit && errors.length === 0;
  report(ok, {});
  if (!ok) process.exitCode = 1;
});
