// mysql2 and a session cut for holding its backend connection idle in a transaction while
// another client waits (--idle-transaction-timeout): the idle connection must get a fatal
// 'error' event carrying ERR 4031 and ringgate's text, and the waiting client its answer.
//
// Usage: node idle_cut.js  (env: PROXY_PORT, A_USER, A_PASSWORD, B_USER, B_PASSWORD; the proxy
// runs with --backend-max-connections 1 and a 1 s --idle-transaction-timeout). Prints one JSON
// line; exits 0 when it passes.
'use strict';

const mysql = require('mysql2');

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};

const connect = (who) =>
  mysql.createConnection({
    host: '127.0.0.1',
    port: Number(env('PROXY_PORT')),
    user: env(`${who}_USER`),
    password: env(`${who}_PASSWORD`),
  });

const query = (conn, sql) =>
  new Promise((resolve, reject) => conn.query(sql, (e, rows) => (e ? reject(e) : resolve(rows))));

async function main() {
  const a = connect('A');
  const cut = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no error event: the idle session was not cut')), 15000);
    a.on('error', (err) => {
      clearTimeout(timer);
      resolve(err);
    });
  });
  await query(a, 'BEGIN');
  // A now holds the only backend connection, idle in its transaction; B's login waits for it.
  const b = connect('B');
  const rows = await query(b, "SELECT 'b' AS who");
  b.end();
  const err = await cut;
  a.destroy();
  const ok =
    rows[0].who === 'b' &&
    err.code === 4031 &&
    err.message.startsWith('The client was disconnected by the server because of inactivity.') &&
    err.message.includes('--idle-transaction-timeout');
  console.log(JSON.stringify({ ok, code: err.code, message: err.message }));
  process.exit(ok ? 0 : 1);
}

main().catch((e) => {
  console.log(JSON.stringify({ ok: false, error: String(e) }));
  process.exit(1);
});
