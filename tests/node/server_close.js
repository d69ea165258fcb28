// The logic of node mysql2's test-server-close, against ringgate: an idle
// mysql2 connection whose server closes it (wait_timeout, then KILL CONNECTION issued directly
// on the server) must get its fatal 'error' event promptly, without sending anything. Through a
// proxy that does not watch idle backends, no event ever comes and the process hangs.
//
// Usage: node server_close.js  (env: PROXY_PORT, APP_USER, APP_PASSWORD, and BACKEND_HOST,
// BACKEND_PORT, BACKEND_USER, BACKEND_PASSWORD for the KILL). Prints one JSON line per
// scenario; exits 0 when both pass.
'use strict';

const mysql = require('mysql2');

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};

const proxy = () =>
  mysql.createConnection({
    host: '127.0.0.1',
    port: Number(env('PROXY_PORT')),
    user: env('APP_USER'),
    password: env('APP_PASSWORD'),
  });

// Resolves with the connection's fatal error and how long after `since` it came; rejects after
// `within` ms (the hang this test exists to catch).
function fatalError(conn, since, within) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      conn.destroy();
      reject(new Error(`no error event within ${within} ms: the client would hang`));
    }, within);
    conn.on('error', (err) => {
      clearTimeout(timer);
      conn.destroy();
      resolve({ err, after: Date.now() - since });
    });
  });
}

// mysql2 reports a bare close as PROTOCOL_CONNECTION_LOST; a server that sends its ERR first
// (MySQL 8: 4031 on wait_timeout) gives that code instead.
const CLOSE_CODES = ['PROTOCOL_CONNECTION_LOST', 'ER_CLIENT_INTERACTION_TIMEOUT', 'ER_CONNECTION_KILLED'];

function check(name, { err, after }, maxMs, minMs = 0) {
  const ok = err.fatal === true && CLOSE_CODES.includes(err.code) && after <= maxMs && after >= minMs;
  console.log(JSON.stringify({ scenario: name, ok, code: err.code, fatal: err.fatal, message: err.message, after_ms: after }));
  return ok;
}

async function waitTimeout() {
  const conn = proxy();
  await conn.promise().query('SET SESSION wait_timeout = 1');
  return check('wait_timeout', await fatalError(conn, Date.now(), 5000), 3500, 900);
}

async function kill() {
  const conn = proxy();
  const [rows] = await conn.promise().query('SELECT CONNECTION_ID() AS id');
  const admin = mysql.createConnection({
    host: env('BACKEND_HOST'),
    port: Number(env('BACKEND_PORT')),
    user: env('BACKEND_USER'),
    password: env('BACKEND_PASSWORD'),
  });
  const since = Date.now();
  const ended = fatalError(conn, since, 3000);
  await admin.promise().query(`KILL CONNECTION ${Number(rows[0].id)}`);
  await admin.promise().end();
  return check('kill_connection', await ended, 1000);
}

(async () => {
  let ok = true;
  for (const scenario of [waitTimeout, kill]) {
    try {
      ok = (await scenario()) && ok;
    } catch (e) {
      console.log(JSON.stringify({ scenario: scenario.name, ok: false, error: String(e) }));
      ok = false;
    }
  }
  process.exit(ok ? 0 : 1);
})();
