// node mysql2 with `compress: true` through ringgate (tests/python/test_compress.py): a 3 MB
// result in one row and in many, and an insert over 16 MiB, compared with what was sent.
'use strict';
const mysql = require('mysql2');

const conn = mysql.createConnection({
  host: '127.0.0.1',
  port: Number(process.env.PROXY_PORT),
  user: process.env.APP_USER,
  password: process.env.APP_PASSWORD,
  database: 'ringgate_test',
  compress: true,
});

function q(sql, args) {
  return new Promise((resolve, reject) => conn.query(sql, args, (e, r) => (e ? reject(e) : resolve(r))));
}

(async () => {
  const one = await q("SELECT REPEAT('x', 3000000) AS v");
  if (one[0].v.length !== 3000000) throw new Error('3 MB row: ' + one[0].v.length);
  const many = await q("SELECT seq, REPEAT('y', 100) AS v FROM seq_1_to_30000");
  if (many.length !== 30000 || many[29999].v !== 'y'.repeat(100)) throw new Error('30000 rows');
  await q('DROP TABLE IF EXISTS compress_node');
  await q('CREATE TABLE compress_node (b LONGBLOB)');
  const data = Buffer.alloc(17 * 1024 * 1024);
  for (let i = 0; i < data.length; i++) data[i] = (i * 7919) & 0xff;
  await q('INSERT INTO compress_node VALUES (?)', [data]);
  const back = await q('SELECT b FROM compress_node');
  if (!Buffer.from(back[0].b).equals(data)) throw new Error('17 MiB blob differs');
  await q('DROP TABLE compress_node');
  // COM_CHANGE_USER behind the compressed leg: the proxy's AuthSwitch and OK are framed too.
  await q('SET @x = 5');
  await new Promise((res, rej) =>
    conn.changeUser({ user: process.env.APP_USER, password: process.env.APP_PASSWORD, database: 'mysql' }, (e) =>
      e ? rej(e) : res()
    )
  );
  const after = await q("SELECT @x AS x, DATABASE() AS db, LENGTH(REPEAT('r', 100000)) AS n");
  if (after[0].x !== null || after[0].db !== 'mysql' || after[0].n !== 100000) {
    throw new Error('after change user: ' + JSON.stringify(after));
  }
  let refused = null;
  try {
    await new Promise((res, rej) =>
      conn.changeUser({ user: process.env.APP_USER, password: 'wrong' }, (e) => (e ? rej(e) : res()))
    );
  } catch (e) {
    refused = e.errno;
  }
  if (refused !== 1045) throw new Error('a wrong password: ' + refused);
  conn.destroy();
  console.log('ok');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
