// `npm run bench:cli`: is the code cache of the commands' script (src/cli/code-cache.ts) worth
// keeping? The time from starting `playbook` to its exit, with the cache filled against without a
// cache at all, in rounds that alternate the two so both see the same machine load; printed as
// the median round's ratio (these machines are shared and noisy; absolute numbers mean little).
// The cache stays only while it saves at least a tenth of a start (ratio <= 0.90).
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { median } from "./stats.js";

const CLI = path.join(import.meta.dirname, "../../bin/playbook.js");
const args = new Map(process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=") as [string, string]));
const ROUNDS = Number(args.get("rounds") ?? (args.has("quick") ? 8 : 30));
const TARGET = 0.9;

const scratch = mkdtempSync(path.join(tmpdir(), "cli-start-bench-"));
const manifest = path.join(scratch, "one.yaml");
writeFileSync(
  manifest,
  "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata: {name: one}\nspec:\n  tasks: [{name: hello, run: 'true'}]\n",
);
// Without: a cache folder that cannot be had (a file where it would go), so nothing is read or
// written. With: a folder of its own, filled by the first start.
const noCache = path.join(scratch, "not-a-folder");
writeFileSync(noCache, "");
const withCache = path.join(scratch, "cache");

function start(command: string[], cacheHome: string): number {
  const from = performance.now();
  const run = spawnSync(process.execPath, [CLI, ...command], {
    env: { PATH: process.env.PATH, HOME: scratch, XDG_CACHE_HOME: cacheHome },
    encoding: "utf8",
  });
  const took = performance.now() - from;
  if (run.status !== 0) throw new Error(`playbook ${command.join(" ")} exited ${run.status}: ${run.stderr}`);
  return took;
}

const COMMANDS: Record<string, string[]> = {
  "run (one task)": ["run", "-f", manifest],
  validate: ["validate", "-f", manifest],
};

console.log(`CLI start benchmark: ${ROUNDS} rounds per command, with the code cache filled vs without`);
let worst = 0;
try {
  for (const [label, command] of Object.entries(COMMANDS)) {
    start(command, withCache); // fills the cache
    const cached: number[] = [];
    const uncached: number[] = [];
    const ratios: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      // Alternating which goes first, so neither always follows the other's page-cache warmth.
      const pair =
        round % 2 === 0
          ? [start(command, withCache), start(command, noCache)]
          : [start(command, noCache), start(command, withCache)].reverse();
      cached.push(pair[0] as number);
      uncached.push(pair[1] as number);
      ratios.push((pair[0] as number) / (pair[1] as number));
    }
    const ratio = median(ratios);
    worst = Math.max(worst, ratio);
    console.log(
      `  ${label}: with cache p50 ${median(cached).toFixed(1)}ms, without p50 ${median(uncached).toFixed(1)}ms; ` +
        `median ratio ${ratio.toFixed(2)} (${Math.round((1 - ratio) * 100)}% saved; target <= ${TARGET.toFixed(2)})`,
    );
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
console.log(worst <= TARGET ? "the cache is worth keeping" : "the cache saves too little: remove it");
