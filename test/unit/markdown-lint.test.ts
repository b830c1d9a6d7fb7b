// The documents' markdown is checked with the repository's markdownlint configuration, and that
// configuration catches the breaks a formatter once made in the README.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, normalize, relative } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../..");
const LINTER = join(ROOT, "node_modules/markdownlint-cli2/markdownlint-cli2-bin.mjs");
const CONFIG = join(ROOT, ".markdownlint-cli2.jsonc");

function lint(...files: string[]): { code: number | null; output: string } {
  const result = spawnSync(process.execPath, [LINTER, "--config", CONFIG, ...files], {
    cwd: ROOT,
    encoding: "utf8",
  });
  return { code: result.status, output: `${result.stdout}${result.stderr}` };
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes, repeats numbered. */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const found = new Set<string>();
  const text = readFileSync(file, "utf8").replace(/^```[\s\S]*?^```/gm, "");
  for (const [, heading] of text.matchAll(/^#+\s+(.*)$/gm)) {
    const slug = (heading ?? "")
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}_\- ]/gu, "")
      .replaceAll(" ", "-");
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    found.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return found;
}

/** Every relative link of a markdown file (outside code) whose file or heading is missing. */
function brokenLinks(file: string): string[] {
  const text = readFileSync(file, "utf8").replace(/^```[\s\S]*?^```/gm, "");
  const broken: string[] = [];
  for (const [, link = ""] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z]+:/.test(link)) continue;
    const [target = "", fragment] = link.split("#");
    const path = target ? normalize(join(dirname(file), target)) : file;
    if (!existsSync(path)) broken.push(`${relative(ROOT, file)}: ${link} (no such file)`);
    else if (fragment && path.endsWith(".md") && !anchors(path).has(fragment))
      broken.push(`${relative(ROOT, file)}: ${link} (no such heading)`);
  }
  return broken;
}

function document(text: string): string {
  const file = join(mkdtempSync(join(tmpdir(), "md-")), "doc.md");
  writeFileSync(file, text);
  return file;
}

describe("markdown lint", () => {
  it("passes the README, docs and the chart's documents", () => {
    const result = lint("README.md", "docs/*.md", "charts/*/README.md", "charts/*/RUNBOOK.md");
    expect(result.output).toContain("Summary: 0 issues");
    expect(result.code).toBe(0);
  });

  it("keeps every line of the README, tables and commands included, readable in 100 columns", () => {
    const long = readFileSync(join(ROOT, "README.md"), "utf8")
      .split("\n")
      .map((line, index) => ({ line: index + 1, length: [...line].length }))
      .filter(({ length }) => length > 100);
    expect(long).toEqual([]);
    // markdownlint says the same while editing (MD013, configured in the README's first line).
    const result = lint(
      document(`${readFileSync(join(ROOT, "README.md"), "utf8")}\n${"word ".repeat(21)}\n`),
    );
    expect(result.output).toMatch(/MD013/);
  });

  it("links only to files and headings that exist, across the README, docs and the chart's documents", () => {
    const chart = join(ROOT, "charts/playbook-controller");
    const files = [
      join(ROOT, "README.md"),
      ...readdirSync(join(ROOT, "docs"))
        .filter((name) => name.endsWith(".md"))
        .map((name) => join(ROOT, "docs", name)),
      join(chart, "README.md"),
      join(chart, "RUNBOOK.md"),
    ];
    expect(files.flatMap(brokenLinks)).toEqual([]);
    // The check itself finds a link to a heading that is not there.
    expect(brokenLinks(document("# Doc\n\nSee [the rest](#no-such-heading).\n"))).toHaveLength(1);
  });

  it.each([
    [
      "a wrapped line starting with '+ ' that turns into a list",
      "# Rules\n\nThe deadline is `min(attempt start + timeout, run start\n+ ceiling)`; the stall timer resets.\n",
      /MD032|MD004/,
    ],
    [
      "a wrapped line starting with '- ' that turns into a list",
      "# Rules\n\nThe deadline is the earlier of the two\n- ceiling) and the stall timer resets.\n",
      /MD032/,
    ],
    [
      "code spans whose spaces a formatter moved outside them",
      "# Rules\n\nThe runner creates the cancel file at `$PLAYBOOK_CANCEL_FILE`(exclusively), sends SIGTERM, waits`killGrace`, then kills the group.\n",
      /code-span-spacing/,
    ],
    [
      "the README's rules paragraph as a formatter once left it",
      [
        "# Rules",
        "",
        "**Rules the runner keeps.** The deadline of an attempt is `min(attempt start + timeout, run start",
        "",
        "- ceiling)`; the stall timer resets on every byte of stdout or stderr. On a limit the runner creates",
        "the cancel file at `$PLAYBOOK_CANCEL_FILE`(exclusively, never through a symlink), sends SIGTERM to",
        "the task's process group, waits`killGrace`, then SIGKILLs the group. Processes that left the group",
        "(`setsid`, double fork) are found by the `PLAYBOOK_ATTEMPT_ID`cookie in their environment.",
        "",
      ].join("\n"),
      /MD038/,
    ],
  ])("reports %s", (_name, text, rule) => {
    const result = lint(document(text));
    expect(result.code).not.toBe(0);
    expect(result.output).toMatch(rule);
  });
});
