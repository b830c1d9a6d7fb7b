// The workflow for users' forges (.github/workflows/ci.yml) runs what .ci/run runs: every vitest
// project (the controller suites against a real API server among them) with the switch its
// project needs, the same checks, the Debian packages the suites need, and the cluster binaries
// built before the suites that start a control plane. The project list is read from
// vitest.config.ts, so a new project that one of the two forgets fails here.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { z } from "zod";

const ROOT = path.join(import.meta.dirname, "../..");
const ciRun = readFileSync(path.join(ROOT, ".ci/run"), "utf8");
const vitestConfig = readFileSync(path.join(ROOT, "vitest.config.ts"), "utf8");

const Step = z.looseObject({
  name: z.string().optional(),
  run: z.string().optional(),
  uses: z.string().optional(),
  with: z.record(z.string(), z.unknown()).optional(),
  env: z.record(z.string(), z.string()).optional(),
});
const Workflow = z.object({
  jobs: z.record(
    z.string(),
    z.looseObject({ env: z.record(z.string(), z.string()).optional(), steps: z.array(Step) }),
  ),
});
const workflow = Workflow.parse(parse(readFileSync(path.join(ROOT, ".github/workflows/ci.yml"), "utf8")));

/** Every run step with its job and the environment it runs in (job env, then step env). */
const runSteps = Object.entries(workflow.jobs).flatMap(([job, { env, steps }]) =>
  steps.flatMap((step, index) =>
    step.run === undefined ? [] : [{ job, index, run: step.run, env: { ...env, ...step.env } }],
  ),
);

/** The vitest projects, each with the environment switch that enables it (if any). */
function projects(): { name: string; gate?: string }[] {
  const found: { name: string; gate?: string }[] = [];
  let from = 0;
  for (const match of vitestConfig.matchAll(/\bname: "([\w-]+)"/g)) {
    const before = vitestConfig.slice(from, match.index);
    const gate = [...before.matchAll(/process\.env\.(\w+) === "1"/g)].at(-1)?.[1];
    found.push({ name: match[1] ?? "", ...(gate ? { gate } : {}) });
    from = match.index + match[0].length;
  }
  return found;
}

/** The commands of .ci/run, one per logical line (continuations joined). */
const ciRunLines = ciRun.replace(/\\\n\s*/g, " ").split("\n");

describe("the workflow for users' forges and .ci/run", () => {
  it("reads the projects of vitest.config.ts (the controller suites are the cluster project)", () => {
    expect(projects()).toEqual([
      { name: "unit" },
      { name: "cluster" },
      { name: "bench", gate: "PLAYBOOK_BENCH" },
      { name: "image" },
      { name: "real-node", gate: "PLAYBOOK_REAL_NODE" },
    ]);
    expect(vitestConfig).toMatch(
      /name: "cluster",\s*include: \["test\/cluster\/\*\*\/\*\.test\.ts", "test\/controller\/\*\*\/\*\.test\.ts"\]/,
    );
  });

  it.each(projects())("both run the $name project", ({ name, gate }) => {
    // .ci/run: `npm test` runs every project no switch gates; a gated one is run on its own.
    const inCiRun = gate
      ? ciRunLines.some((line) => line.includes(`${gate}=1`) && line.includes(`--project ${name}`))
      : ciRunLines.some((line) => /^npm test\b/.test(line.trim()) && !line.includes("--project"));
    expect(inCiRun, `.ci/run runs ${name}`).toBe(true);
    const inWorkflow = runSteps.filter(
      ({ run, env }) =>
        new RegExp(`vitest run --project ${name}(\\s|$)`).test(run) &&
        (gate === undefined || run.includes(`${gate}=1`) || env[gate] === "1"),
    );
    expect(
      inWorkflow.map(({ job }) => job),
      `a step of .github/workflows/ci.yml runs --project ${name}${gate ? ` with ${gate}=1` : ""}`,
    ).not.toEqual([]);
  });

  it("builds the cluster binaries, with Go and a cache keyed on the tools' versions, before a suite that starts a control plane", () => {
    for (const name of ["cluster", "real-node", "bench"]) {
      const suite = runSteps.find(({ run }) => run.includes(`--project ${name}`));
      expect(suite, name).toBeDefined();
      const job = workflow.jobs[suite?.job ?? ""];
      const steps = job?.steps ?? [];
      const built = steps.findIndex((step) => step.run?.includes("tools:bin"));
      expect(built, `${name}: tools:bin in job ${suite?.job}`).toBeGreaterThanOrEqual(0);
      expect(built).toBeLessThan(suite?.index ?? -1);
      const goSetUp = steps.some(
        (step) => step.uses?.startsWith("actions/setup-go@") || step.run?.includes("tools/install-go.sh"),
      );
      expect(goSetUp, `${name}: Go set up in job ${suite?.job}`).toBe(true);
      const cache = steps.find((step) => step.uses?.startsWith("actions/cache@"));
      expect(cache?.with?.path).toBe("~/.cache/playbook-controller/bin");
      expect(String(cache?.with?.key)).toContain("tools/*/go.mod");
    }
  });

  it("builds in each job only the set of binaries its suites run, cached under a key that names the set", () => {
    // The real node needs the control plane and the kubelet, kube-proxy and containerd (set all);
    // the cluster, bench and image suites start a control plane only (set control-plane), and
    // would otherwise build the real-node set for nothing. A cache saved by a job of one set must
    // not be restored by a job of the other, which would then rebuild what is missing every time.
    const jobs = Object.entries(workflow.jobs).filter(([, { steps }]) =>
      steps.some((step) => step.run?.includes("tools:bin")),
    );
    expect(jobs.map(([job]) => job).sort()).toEqual(["cluster", "image", "real-node"]);
    for (const [job, { steps }] of jobs) {
      const suites = runSteps.filter((step) => step.job === job && /vitest run --project /.test(step.run));
      const wanted = suites.some(({ run }) => run.includes("--project real-node")) ? "all" : "control-plane";
      const build = steps.find((step) => step.run?.includes("tools:bin"))?.run ?? "";
      expect(build, `${job}: the set it builds`).toMatch(
        new RegExp(`PLAYBOOK_TOOLS_SET=${wanted} npm run --silent tools:bin`),
      );
      const cache = steps.find((step) => step.uses?.startsWith("actions/cache@"));
      expect(String(cache?.with?.key), `${job}: the cache key`).toMatch(new RegExp(`^tools-bin-${wanted}-`));
    }
  });

  it.each([
    "npm run --silent lint",
    "npm run --silent lint:md",
    "npm run --silent typecheck",
    "npm run --silent audit:bundle",
  ])("both run %s", (command) => {
    expect(ciRun).toContain(command);
    expect(runSteps.some(({ run }) => run.split("\n").some((line) => line.trim() === command))).toBe(true);
  });

  it("the workflow's audit fails when the advisory database cannot be reached (only .ci/run tolerates it)", () => {
    const audits = runSteps.filter(({ run }) => run.includes("audit:bundle"));
    expect(audits.length).toBeGreaterThan(0);
    for (const { run } of audits) expect(run).not.toContain("--if-unreachable warn");
  });

  it("installs the Debian packages .ci/run installs", () => {
    const wanted = [...ciRun.matchAll(/(?:missing|with_recommends)\+=\(([\w.-]+)\)/g)].map((m) => m[1] ?? "");
    expect(wanted).toContain("prometheus");
    // The image job builds with Docker (PLAYBOOK_CONTAINER_ENGINE=docker): podman and the
    // debootstrap-made base stand-in are what .ci/run uses where Docker is missing.
    const replacedByDocker = new Set(["podman", "debootstrap"]);
    expect(workflow.jobs.image?.env?.PLAYBOOK_CONTAINER_ENGINE).toBe("docker");
    const installs = runSteps.map(({ run }) => run).join("\n");
    const missing = wanted.filter(
      (name) => !replacedByDocker.has(name) && !new RegExp(`(^|[\\s(])${name}([\\s)]|$)`, "m").test(installs),
    );
    expect(missing, "packages of .ci/run no workflow step installs").toEqual([]);
  });
});

describe(".ci/run's phase times", () => {
  it("prints each phase's seconds and the total at the end", () => {
    // The functions .ci/run sources, with three phases whose time is set on bash's own clock.
    const result = spawnSync(
      "bash",
      [
        "-c",
        `. .ci/phases.sh
step "npm ci"; SECONDS=$((SECONDS + 12))
step "lint"; SECONDS=$((SECONDS + 3))
step "the real node (containerd and a real kubelet): PLAYBOOK_REAL_NODE=1 vitest --project real-node"
SECONDS=$((SECONDS + 1260))
phase_times`,
      ],
      { cwd: ROOT, encoding: "utf8" },
    );
    expect(result.status).toBe(0);
    const row = (name: string, seconds: number) => `${name.padEnd(32)} ${String(seconds).padStart(6)} s`;
    expect(result.stdout.trimEnd().split("\n").slice(-5)).toEqual([
      "==> phase times",
      row("npm ci", 12),
      row("lint", 3),
      row("the real node", 1260),
      row("total", 1275),
    ]);
    expect(result.stdout).toContain(
      "\n==> the real node (containerd and a real kubelet): PLAYBOOK_REAL_NODE=1",
    );
  });

  it("prints them after the last phase and before the summary whose last line CI reads", () => {
    const lines = ciRun.split("\n");
    expect(lines).toContain(". .ci/phases.sh");
    const lastPhase = lines.findLastIndex((line) => line.startsWith("step "));
    const times = lines.indexOf("phase_times");
    const summary = lines.findIndex((line) => line.startsWith("node -e"));
    expect(lastPhase).toBeGreaterThan(0);
    expect(times).toBeGreaterThan(lastPhase);
    expect(summary).toBeGreaterThan(times);
    // Nothing is printed after the summary's line.
    const summaryScript = lines.slice(summary).join("\n");
    const printed = [...summaryScript.matchAll(/console\.log\((.*)\);/g)].map((match) => match[1]);
    expect(printed.at(-1)).toMatch(/^`\$\{passed\} passed, \$\{failed\} failed`$/);
    expect(summaryScript.trimEnd().endsWith('\n\' || status=1\nexit "$status"')).toBe(true);
  });
});
