// node mysql2 over TLS through ringgate (tests/python/test_tls.py): the server certificate is
// verified against the test CA; a 3 MB result, a 17 MiB insert read back, then the same with
// compression inside TLS.
'use strict';
const fs = require('fs');
const mysql = require('mysql2');

function connect(compress) {
  return mysql.createConnection({
    host: '127.0.0.1',
    port: Number(process.env.PROXY_PORT),
    user: process.env.APP_USER,
    password: process.env.APP_PASSWORD,
    database: 'ringgate_test',
    compress,
    ssl: { ca: fs.readFileSync(process.env.TLS_CA), rejectUnauthorized: true, servername: 'localhost' },
  });
}

function q(conn, sql, args) {
  return new Promise((resolve, reject) => conn.query(sql, args, (e, r) => (e ? reject(e) : resolve(r))));
}

async function run(compress) {
  const conn = connect(compress);
  const one = await q(conn, "SELECT REPEAT('x', 3000000) AS v");
  if (one[0].v.length !== 3000000) throw new Error('3 MB row: ' + one[0].v.length);
  const table = compress ? 'tls_node_c' : 'tls_node';
  await q(conn, `DROP TABLE IF EXISTS ${table}`);
  await q(conn, `CREATE TABLE ${table} (b LONGBLOB)`);
  const data = Buffer.alloc(17 * 1024 * 1024);
  for (let i = 0; i < data.length; i++) data[i] = (i * 7919) & 0xff;
  await q(conn, `INSERT INTO ${table} VALUES (?)`, [data]);
  const back = await q(conn, `SELECT b FROM ${table}`);
  if (!Buffer.from(back[0].b).equals(data)) throw new Error('17 MiB blob differs');
  await q(conn, `DROP TABLE ${table}`);
  const proto = conn.stream.getProtocol ? conn.stream.getProtocol() : 'unknown';
  await new Promise((res) => conn.end(res));
  return proto;
}

(async () => {
  const plainProto = await run(false);
  const compressedProto = await run(true);
  console.log(`ok ${plainProto} ${compressedProto}`);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
