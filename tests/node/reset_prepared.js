// node mysql2's COM_RESET_CONNECTION with prepared statements, as in mysql2's own
// connection/test-reset-connection and pool/test-pool-reset-on-release: conn.reset() clears
// mysql2's statement cache, so the next execute() prepares its text again and runs it; a pool
// with resetOnRelease does the same at every reuse. Through ringgate in transaction pooling the
// second prepare must get a statement the server still has.
//
// Usage: node reset_prepared.js  (env: PORT, USER, PASS, DB, ROUNDS). Prints one JSON line
// {"executes": n} and exits 0 when every answer was right.
'use strict';

const mysql = require('mysql2/promise');

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};

const options = () => ({
  host: '127.0.0.1',
  port: Number(env('PORT')),
  user: env('USER'),
  password: env('PASS'),
  database: env('DB'),
});

async function value(conn, v) {
  const [rows] = await conn.execute('SELECT ? AS value', [v]);
  if (rows.length !== 1 || Number(rows[0].value) !== v) {
    throw new Error(`SELECT ? AS value with ${v}: ${JSON.stringify(rows)}`);
  }
}

// Prepare, execute, reset, prepare the same text again, execute.
async function connectionReset(rounds) {
  const conn = await mysql.createConnection(options());
  let n = 0;
  try {
    for (let k = 0; k < rounds; k++) {
      await value(conn, k);
      await conn.reset();
      if (conn.connection._statements.size !== 0) throw new Error('reset kept the statement cache');
      await value(conn, k + 1000);
      n += 2;
    }
  } finally {
    await conn.end();
  }
  return n;
}

// One pooled connection, reset at each release, reused with the same statement.
async function poolResetOnRelease(rounds) {
  const pool = mysql.createPool({ ...options(), connectionLimit: 1, resetOnRelease: true });
  let n = 0;
  try {
    for (let k = 0; k < rounds; k++) {
      const conn = await pool.getConnection();
      try {
        await value(conn, k);
        n += 1;
      } finally {
        conn.release();
      }
    }
  } finally {
    await pool.end();
  }
  return n;
}

(async () => {
  const rounds = Number(env('ROUNDS'));
  const executes = (await connectionReset(rounds)) + (await poolResetOnRelease(rounds));
  console.log(JSON.stringify({ executes }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
