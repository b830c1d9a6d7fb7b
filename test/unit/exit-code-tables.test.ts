// The exit codes as the docs tell them and as each command's --help prints them: read from the
// README, docs/cli.md and docs/design.md and from the built CLI, and held to the one table in the
// code (exitCodeForReason) and to each other, so that no page can say a code the command never gives.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TERMINAL_REASONS } from "../../src/api/reasons.js";
import { EXIT, exitCodeForReason } from "../../src/cli/exit-codes.js";
import { startCli } from "../support/cli.js";

const ROOT = join(import.meta.dirname, "../..");
const DOCS = ["README.md", "docs/cli.md", "docs/design.md"];
/** The codes an outcome gives: what `run` and every command that waits on a run can exit with. */
const OUTCOME_CODES = [...new Set(TERMINAL_REASONS.map(exitCodeForReason)), EXIT.invalid, EXIT.interrupted]
  .filter((code, index, all) => all.indexOf(code) === index)
  .sort((a, b) => a - b);

type Table = Map<number, string>;

/** Every markdown table whose first column is `code`: each code's row, continuation rows joined. */
function markdownTables(text: string): Table[] {
  const tables: Table[] = [];
  let current: Table | undefined;
  let last: number | undefined;
  for (const line of text.split("\n")) {
    if (!line.startsWith("|")) {
      current = undefined;
      continue;
    }
    const cells = line.split("|").map((cell) => cell.trim());
    const first = cells[1] ?? "";
    if (first === "code") {
      current = new Map();
      tables.push(current);
      last = undefined;
      continue;
    }
    if (!current || /^-+$/.test(first)) continue;
    const row = cells.slice(2).join(" ");
    if (/^\d+$/.test(first)) {
      last = Number(first);
      current.set(last, row);
    } else if (first === "" && last !== undefined) {
      current.set(last, `${current.get(last)} ${row}`);
    }
  }
  return tables;
}

/** The table a command's --help prints after its "Exit codes" line. */
function helpTable(help: string): Table {
  const table: Table = new Map();
  const lines = help.split("\n");
  const start = lines.findIndex((line) => line.startsWith("Exit codes"));
  for (const line of lines.slice(start + 1)) {
    const row = /^ {2}(\d+)\s+(.*)$/.exec(line);
    if (!row) break;
    table.set(Number(row[1]), row[2] ?? "");
  }
  return table;
}

/** What is wrong with a table of outcomes: a reason under another code, a reason left out, 4 unexplained. */
function outcomeProblems(table: Table): string[] {
  const problems: string[] = [];
  for (const [code, text] of table) {
    for (const reason of TERMINAL_REASONS) {
      if (new RegExp(`\\b${reason}\\b`).test(text) && exitCodeForReason(reason) !== code) {
        problems.push(`${reason} is under ${code}, but exits ${exitCodeForReason(reason)}`);
      }
    }
    if (code === EXIT.waitTimedOut && !text.includes("--timeout")) {
      problems.push(`4 does not say it is the command's own --timeout: ${text}`);
    }
    if (!OUTCOME_CODES.includes(code) && code !== EXIT.waitTimedOut)
      problems.push(`${code} is no code of ours`);
  }
  for (const code of OUTCOME_CODES) if (!table.has(code)) problems.push(`${code} is missing`);
  for (const reason of TERMINAL_REASONS) {
    if (![...table.values()].some((text) => new RegExp(`\\b${reason}\\b`).test(text))) {
      problems.push(`${reason} is in no row`);
    }
  }
  return problems;
}

describe("the exit codes in the docs", () => {
  it.each(DOCS)("%s: every exit-code table gives each reason the code it exits with", (file) => {
    const tables = markdownTables(readFileSync(join(ROOT, file), "utf8"));
    expect(tables.length, `${file} has an exit-code table`).toBeGreaterThan(0);
    for (const table of tables) expect(outcomeProblems(table), file).toEqual([]);
  });

  it.each(DOCS)("%s: says no --timeout gives up with another code than 4", (file) => {
    const text = readFileSync(join(ROOT, file), "utf8").replace(/\s+/g, " ");
    const claims = [
      ...text.matchAll(/--timeout`?[^.|]*?\b(giving up|gives up|runs out|ran out)[^.|]*?\bexits? (\d+)/g),
    ].map((match) => match[0]);
    expect(claims.filter((claim) => !claim.endsWith(` ${EXIT.waitTimedOut}`))).toEqual([]);
  });
});

describe("the exit codes in --help", () => {
  const helps = new Map<string, Promise<Table>>();
  const tableOf = (command: string[]) => {
    const key = command.join(" ");
    if (!helps.has(key)) {
      helps.set(
        key,
        startCli([...command, "--help"]).then((result) => {
          expect(result.code).toBe(0);
          return helpTable(result.stdout);
        }),
      );
    }
    return helps.get(key) as Promise<Table>;
  };

  it.each([
    { command: ["run"], codes: OUTCOME_CODES },
    { command: ["submit"], codes: OUTCOME_CODES },
    { command: ["wait"], codes: [...OUTCOME_CODES, EXIT.waitTimedOut].sort((a, b) => a - b) },
    { command: ["cancel"], codes: [...OUTCOME_CODES, EXIT.waitTimedOut].sort((a, b) => a - b) },
  ])("$command.0 --help lists the codes it can exit with, and no other", async ({ command, codes }) => {
    const table = await tableOf(command);
    expect([...table.keys()].sort((a, b) => a - b)).toEqual(codes);
    expect(outcomeProblems(table)).toEqual([]);
  });

  it.each(DOCS)("%s: each table gives a code the same reasons --help gives it", async (file) => {
    const help = await tableOf(["wait"]);
    const reasonsOf = (text: string) =>
      TERMINAL_REASONS.filter((reason) => new RegExp(`\\b${reason}\\b`).test(text)).sort();
    for (const table of markdownTables(readFileSync(join(ROOT, file), "utf8"))) {
      for (const [code, text] of table) {
        expect(reasonsOf(text), `${file}, code ${code}`).toEqual(reasonsOf(help.get(code) ?? ""));
      }
    }
  });

  it("cron trigger --help and docs/cli.md's cron trigger section list the same codes", async () => {
    const help = await tableOf(["cron", "trigger"]);
    const text = readFileSync(join(ROOT, "docs/cli.md"), "utf8");
    const section = text.slice(
      text.indexOf("## cron trigger"),
      text.indexOf("\n## ", text.indexOf("## cron trigger") + 1),
    );
    const documented = [...new Set([...section.matchAll(/\bexit (\d+)/g)].map((match) => Number(match[1])))];
    expect(documented.sort((a, b) => a - b)).toEqual([...help.keys()].sort((a, b) => a - b));
  });
});
