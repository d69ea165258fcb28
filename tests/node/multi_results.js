// node mysql2's multi-statement results, as its own connection/test-multiple-results checks
// them: every result header's serverStatus, affectedRows, insertId, warningStatus, info and
// changedRows, and each result set's rows. Run once direct and once through ringgate; the test
// compares the two outputs.
//
// Usage: node multi_results.js  (env: PORT, USER, PASS, DB). Prints one JSON line: a list of
// [sql, results] pairs.
'use strict';

const mysql = require('mysql2/promise');

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};

const STATEMENTS = [
  'set @a = 1',
  'set @a = 1; set @b = 2',
  'select 1; select 2',
  'set @a = 1; select 1',
  'select 1; set @a = 1',
  '/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;/*!40101 SET @OLD_CHARACTER_SET_RESULTS=@@CHARACTER_SET_RESULTS */;',
  'SET autocommit = 1',
  'USE ' + process.env.DB,
  'SET time_zone = "+00:00"; SELECT 3',
];

function header(h) {
  return {
    serverStatus: h.serverStatus,
    affectedRows: h.affectedRows,
    insertId: h.insertId,
    warningStatus: h.warningStatus,
    info: h.info,
    changedRows: h.changedRows,
  };
}

function describe(rows) {
  const one = (r) => (r && r.constructor && r.constructor.name === 'ResultSetHeader' ? header(r) : r);
  return Array.isArray(rows) && rows.some((r) => r && r.constructor && r.constructor.name === 'ResultSetHeader')
    ? rows.map(one)
    : one(rows);
}

async function main() {
  const conn = await mysql.createConnection({
    host: '127.0.0.1',
    port: Number(env('PORT')),
    user: env('USER'),
    password: env('PASS'),
    database: env('DB'),
    multipleStatements: true,
  });
  const out = [];
  try {
    for (const sql of STATEMENTS) {
      const [rows] = await conn.query(sql);
      out.push([sql, describe(rows)]);
    }
  } finally {
    await conn.end();
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
