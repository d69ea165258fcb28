// node mysql2's conn.execute() (COM_STMT_PREPARE/EXECUTE, with mysql2's own statement cache)
// through `ringgate --pooling transaction`: CLIENTS connections each run
// ROUNDS executes of a few statements with string, integer and NULL parameters while their
// sessions move between the few backend connections; every answer is checked here.
//
// Usage: node execute.js  (env: PORT, USER, PASS, DB, TABLE, CLIENTS, ROUNDS). Prints one JSON
// line {"executes": n} and exits 0 when every answer was right.
'use strict';

const mysql = require('mysql2/promise');

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};

async function client(i, rounds) {
  const conn = await mysql.createConnection({
    host: '127.0.0.1',
    port: Number(env('PORT')),
    user: env('USER'),
    password: env('PASS'),
    database: env('DB'),
  });
  let n = 0;
  try {
    for (let k = 0; k < rounds; k++) {
      const id = ((i * 31 + k) % 200) + 1;
      const [rows] = await conn.execute(`SELECT id, owner, body FROM ${env('TABLE')} WHERE id = ?`, [id]);
      if (rows.length !== 1 || rows[0].id !== id || rows[0].owner !== id % 7 || rows[0].body.toString() !== `row-${id}`) {
        throw new Error(`client ${i} round ${k}: ${JSON.stringify(rows)}`);
      }
      const [r2] = await conn.execute('SELECT CONCAT(?, ?) AS s, ? + 1 AS n, ? IS NULL AS z', [`c${i}-`, String(k), k, null]);
      if (r2[0].s !== `c${i}-${k}` || Number(r2[0].n) !== k + 1 || Number(r2[0].z) !== 1) {
        throw new Error(`client ${i} round ${k}: ${JSON.stringify(r2)}`);
      }
      n += 2;
    }
  } finally {
    await conn.end();
  }
  return n;
}

(async () => {
  const clients = Number(env('CLIENTS'));
  const rounds = Number(env('ROUNDS'));
  const counts = await Promise.all([...Array(clients).keys()].map((i) => client(i, rounds)));
  console.log(JSON.stringify({ executes: counts.reduce((a, b) => a + b, 0) }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
