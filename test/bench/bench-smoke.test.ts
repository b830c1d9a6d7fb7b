// The benchmark's smoke test: `npm run bench -- --quick` against a real control plane must end
// within 5 minutes on a 2-core machine and report every name with numbers; `npm run bench:cron --
// --quick` (a control plane of its own, 20 CronJobs and 20 CronPlaybooks due at one minute) within
// 3 more. It checks that the
// suite measures, not what it measures: the targets are for the README's runs, not for CI.
// Run alone: PLAYBOOK_BENCH=1 npx vitest run --project bench.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import { BenchResultsSchema, REQUIRED_COMPARISONS, REQUIRED_FIGURES } from "./results.js";

const FIVE_MINUTES = 300_000;
// Up to a minute and a quarter of it waiting for the minute the schedules are due.
const THREE_MINUTES = 180_000;
const dir = mkdtempSync(path.join(tmpdir(), "bench-smoke-"));
let running: ChildProcess | undefined;
afterAll(() => {
  // Past the timeout the benchmark is stopped as Ctrl-C would: it takes its cluster down.
  if (running?.pid !== undefined && running.exitCode === null) process.kill(-running.pid, "SIGINT");
  rmSync(dir, { recursive: true, force: true });
});

function runQuickBench(json: string, script = "bench"): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn("npm", ["run", "--silent", script, "--", "--quick", "--json", json], {
      cwd: repoRoot(),
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    running = child;
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on("close", (code) => resolve({ code, output }));
  });
}

describe("npm run bench -- --quick", () => {
  it(
    "reports every comparison and figure with numbers within five minutes",
    async () => {
      const json = path.join(dir, "results.json");
      const { code, output } = await runQuickBench(json);
      expect(code, output.slice(-4000)).toBe(0);
      const results = BenchResultsSchema.parse(JSON.parse(readFileSync(json, "utf8")));
      expect(results.quick).toBe(true);
      for (const name of REQUIRED_COMPARISONS) {
        const entry = results.comparisons.find((c) => c.name === name);
        expect(entry, `${name} in comparisons`).toBeDefined();
        expect(typeof entry?.ours, `${name}.ours`).toBe("number");
        expect(typeof entry?.reference, `${name}.reference`).toBe("number");
        expect(typeof entry?.ratio, `${name}.ratio`).toBe("number");
      }
      for (const name of REQUIRED_FIGURES) {
        const entry = results.figures.find((f) => f.name === name);
        expect(entry, `${name} in figures`).toBeDefined();
        expect(typeof entry?.value, `${name}.value`).toBe("number");
      }
      // The printed table names each comparison too.
      for (const name of REQUIRED_COMPARISONS) expect(output).toMatch(new RegExp(`^${name}\\s`, "m"));
    },
    FIVE_MINUTES,
  );
});

describe("npm run bench:cron -- --quick", () => {
  it(
    "reports cron_schedule_delay_p99 against the CronJob controller, and both controllers' memory",
    async () => {
      const json = path.join(dir, "cron.json");
      const { code, output } = await runQuickBench(json, "bench:cron");
      expect(code, output.slice(-4000)).toBe(0);
      const results = BenchResultsSchema.parse(JSON.parse(readFileSync(json, "utf8")));
      expect(results.quick).toBe(true);
      const delay = results.comparisons.find((c) => c.name === "cron_schedule_delay_p99");
      expect(delay).toMatchObject({ unit: "s", target: "<= 1.0" });
      expect(typeof delay?.ours).toBe("number");
      expect(typeof delay?.reference).toBe("number");
      for (const name of ["cron_controller_rss_mb_20", "kube_controller_manager_rss_mb_20"])
        expect(results.figures.find((f) => f.name === name)?.value, name).toBeGreaterThan(0);
      expect(output).toMatch(/^cron_schedule_delay_p99\s/m);
    },
    THREE_MINUTES,
  );
});
