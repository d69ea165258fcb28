// node mysql2's conn.changeUser (COM_CHANGE_USER), the logic of mysql2's own
// test-change-user (which needs accounts @localhost, unreachable over TCP with the sandbox's
// --skip-name-resolve) on two real accounts: change to another user, with a password and with
// passwordSha1 (what the password is to mysql_native_password), with a schema and a charset; a
// wrong password. The same script runs direct against MariaDB and through ringgate, and the
// test compares the two outputs.
//
// Usage: node change_user.js  (env: PORT, USER_A, PASS_A, USER_B, PASS_B, DB). Prints one JSON
// line per step; exits 0 when every step ran (the values are compared by the caller).
'use strict';

const crypto = require('crypto');
const mysql = require('mysql2');

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};

const conn = mysql.createConnection({
  host: '127.0.0.1',
  port: Number(env('PORT')),
  user: env('USER_A'),
  password: env('PASS_A'),
  database: env('DB'),
});
const q = (sql) => conn.promise().query(sql).then(([rows]) => rows[0]);
const change = (opts) =>
  new Promise((resolve) => conn.changeUser(opts, (err) => resolve(err ? { code: err.code, errno: err.errno, message: err.message, fatal: !!err.fatal } : null)));

const STATE = 'SELECT CURRENT_USER() AS me, DATABASE() AS db, @x AS x, @@character_set_client AS cs';

(async () => {
  const steps = [];
  const step = async (name, fn) => {
    const res = await fn();
    steps.push(name);
    console.log(JSON.stringify({ step: name, ...res }));
  };
  try {
    await step('start', async () => {
      await q('SET @x = 1');
      return { state: await q(STATE) };
    });
    await step('to_b_with_schema', async () => {
      const err = await change({ user: env('USER_B'), password: env('PASS_B'), database: env('DB') });
      return { err, state: await q(STATE) };
    });
    await step('wrong_password', async () => {
      await q('SET @x = 2');
      const err = await change({ user: env('USER_A'), password: 'wrong' });
      return { err, state: await q(STATE) };
    });
    await step('to_a_by_sha1', async () => {
      const sha1 = crypto.createHash('sha1').update(env('PASS_A')).digest();
      const err = await change({ user: env('USER_A'), passwordSha1: sha1 });
      return { err, state: await q(STATE) };
    });
    await step('to_b_latin1', async () => {
      const err = await change({ user: env('USER_B'), password: env('PASS_B'), charset: 'LATIN1_SWEDISH_CI' });
      return { err, state: await q(STATE) };
    });
    await conn.promise().end();
  } catch (e) {
    console.log(JSON.stringify({ step: 'failed', error: String(e), after: steps }));
    conn.destroy();
    process.exit(1);
  }
  process.exit(0);
})();
