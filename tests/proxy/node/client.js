// node-postgres against the dpsql proxy: a simple query, a parameterised one (extended protocol),
// a refusal with its SQLSTATE, then the connection still usable. Prints one JSON line per step.
const { Client } = require("pg");

async function main() {
  const [port, user, password] = process.argv.slice(2);
  const client = new Client({ host: "127.0.0.1", port: Number(port), user, password, database: "test" });
  const notices = [];
  client.on("notice", (n) => notices.push(n.message));
  await client.connect();
  const plain = await client.query("SELECT state, COUNT(*) AS n FROM people GROUP BY state");
  console.log(JSON.stringify({ step: "plain", fields: plain.fields.map((f) => [f.name, f.dataTypeID]),
                               rows: plain.rows.length, first: plain.rows[0] }));
  const param = await client.query("SELECT COUNT(*) AS n FROM people WHERE age > $1", [30]);
  console.log(JSON.stringify({ step: "param", n: param.rows[0].n }));
  try {
    await client.query("SELECT * FROM people");
    console.log(JSON.stringify({ step: "refused", code: null }));
  } catch (err) {
    console.log(JSON.stringify({ step: "refused", code: err.code, message: err.message }));
  }
  const budget = await client.query("SHOW dpsql.budget");
  console.log(JSON.stringify({ step: "budget", row: budget.rows[0], notices: notices.length }));
  await client.end();
}

main().catch((err) => { console.error(err); process.exit(1); });
