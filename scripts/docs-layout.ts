// `npm run docs:layout`: writes docs/development.md's "Layout" section from the folders of the
// checkout, so it cannot drift from the tree. Folder level only (a new file changes nothing): the
// top-level folders, and every folder under src/ and test/, each with its line of FOLDER_DESCRIPTIONS.
// A folder without a line is refused, naming it. `-- --check` writes nothing and fails when stale.
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { repoRoot } from "../test/harness/binaries.js";

export const LAYOUT_FILE = path.join("docs", "development.md");
export const LAYOUT_START = "<!-- layout:start: npm run docs:layout writes this block -->";
export const LAYOUT_END = "<!-- layout:end -->";

/** Folders whose every subfolder is listed too; other top-level folders are listed alone. */
const WALKED = ["src", "test"];
/** Top-level folders that are not the project's source: built, installed or local state. */
const IGNORED = new Set(["node_modules", "dist", "coverage", "test-results"]);

/** One line per folder: what it holds. A new folder needs its line here (the unit test says which). */
export const FOLDER_DESCRIPTIONS: Readonly<Record<string, string>> = {
  agent: "the task containers' agent: static C built with musl (docs/agent.md)",
  charts: "the Helm chart: templates, values and their schema, dashboards, alerts, RUNBOOK.md",
  crds: "the Playbook, PlaybookPolicy and CronPlaybook CRDs (the one source; the chart carries a checked copy)",
  docs: "the user's and the developer's documents (this one, architecture.md, design.md, ...)",
  deploy:
    "what the plain `kubectl apply` install adds beside the CRDs: the ValidatingAdmissionPolicy and its binding",
  examples: "Playbooks to try, a PlaybookPolicy (policy.yaml) and a CronPlaybook (nightly-backup.yaml)",
  scripts:
    "npm run scripts: cluster:up/down, chart:generate, docs:layout, kernel:generate, image:build/base, the bundler and its notices and SBOM",
  src: "the TypeScript source, in floors that import one way: api <- pod-runner, runtime <- controller <- cli",
  "src/api":
    "the shared vocabulary: Playbook, policy and CronPlaybook schemas (zod), durations, limits, reasons, plan, report, status",
  "src/cli": "the `playbook` command: parses flags, calls one entry, prints progress and results",
  "src/cli/advise": "`playbook advise`: limits proposed from a history of runs, and how they were reached",
  "src/cli/cluster":
    "the cluster commands: submit, wait, cancel, logs, describe, cron trigger, and the connection",
  "src/controller":
    "the domain: the manager (controller.ts), its config, and what the kinds share: decisions, run plans, status, metrics",
  "src/controller/cron":
    "the CronPlaybook's reconcile: its decision, triggers, concurrency, writer and metrics",
  "src/controller/kueue":
    "runs through Kueue: the pod's queue labels, the hold, Workloads, preemption, queued time",
  "src/controller/log-archive":
    "the log archive: its S3 store and key layout, each attempt's log followed into an upload (the cap, LogArchived), retention (the finalizer), and the log API that reads it back through the API server",
  "src/controller/playbook":
    "the Playbook's reconcile: start, active, cancel, ended and queued decisions, live progress, the writer",
  "src/controller/pods":
    "a run's pod: building it, its task containers, reading its state, trusting its report",
  "src/controller/policy": "the namespace's PlaybookPolicy: the governor, the run queue, the policy's status",
  "src/pod-runner":
    "the runner, in a pod or local: process groups, deadlines, stall, cancel file, signals, finally, agents, report",
  "src/runtime":
    "the controller's plumbing: API client, informers, work queue, leader election, server, metrics registry",
  test: "the suites, one folder per layer (vitest projects), and what they share",
  "test/bench": "benchmarks (npm run bench, bench:runner, bench:cli, ...) and their smoke test",
  "test/cluster": "the control plane itself, on real binaries",
  "test/controller": "the controller on the real control plane, pod status written by the tests",
  "test/harness":
    "the test control plane, the scripted node, the real node, the image and the binaries they need",
  "test/harness/fixtures": "stand-in manifests the harness applies (prometheus-operator's CRDs)",
  "test/harness/real-node":
    "the real node: kubelet and containerd, its registry, images and relay, set up for the tests",
  "test/image": "the image run with testcontainers: examples, tini and uid 65532, the controller",
  "test/real-node": "end to end on Kubernetes' kubelet with containerd (PLAYBOOK_REAL_NODE=1)",
  "test/runner": "the runner and the CLI with real processes and signals",
  "test/support": "helpers the suites share: starting the CLI, runners, processes, examples",
  "test/unit": "pure logic: schemas, durations, reports, reconcile decisions, generated files",
  tools:
    "Go modules that build kube-apiserver, etcd, kubelet, containerd, Kueue, kubectl and helm; podman's settings",
};

/** The folders the layout lists, relative to `root`, in the order it lists them. */
export function layoutFolders(root: string): string[] {
  const folders: string[] = [];
  const walk = (relative: string): void => {
    folders.push(relative);
    if (!WALKED.some((top) => relative === top || relative.startsWith(`${top}/`))) return;
    for (const entry of subfolders(path.join(root, relative))) walk(`${relative}/${entry}`);
  };
  for (const entry of subfolders(root).filter((name) => !IGNORED.has(name))) walk(entry);
  return folders;
}

function subfolders(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && !entry.name.startsWith("."))
    .map((entry) => entry.name)
    .sort();
}

/** The folders the layout would list that have no line in `descriptions`. */
export function undescribedFolders(
  root: string,
  descriptions: Readonly<Record<string, string>> = FOLDER_DESCRIPTIONS,
): string[] {
  return layoutFolders(root).filter((folder) => !descriptions[folder]);
}

/** Lines of `descriptions` for folders the layout no longer lists (gone, or moved). */
export function staleDescriptions(
  root: string,
  descriptions: Readonly<Record<string, string>> = FOLDER_DESCRIPTIONS,
): string[] {
  const listed = new Set(layoutFolders(root));
  return Object.keys(descriptions).filter((folder) => !listed.has(folder));
}

/** The layout block: one line per folder, its path then its description, in a fenced block. */
export function renderLayout(
  root: string,
  descriptions: Readonly<Record<string, string>> = FOLDER_DESCRIPTIONS,
): string {
  // One walk of the tree: the folders listed are those checked for a line.
  const folders = layoutFolders(root);
  const missing = folders.filter((folder) => !descriptions[folder]);
  if (missing.length > 0) {
    throw new Error(
      `docs:layout: no description for ${missing.map((folder) => `${folder}/`).join(", ")}: add a line for each to FOLDER_DESCRIPTIONS in scripts/docs-layout.ts`,
    );
  }
  const width = Math.max(...folders.map((folder) => folder.length + 1)) + 2;
  const lines = folders.map((folder) => `${`${folder}/`.padEnd(width)}${descriptions[folder]}`.trimEnd());
  return ["```text", ...lines, "```"].join("\n");
}

/** `text` with what lies between the layout markers replaced by `block`; refused without markers. */
export function withLayout(text: string, block: string, file: string = LAYOUT_FILE): string {
  const start = text.indexOf(LAYOUT_START);
  const end = text.indexOf(LAYOUT_END);
  if (start === -1 || end === -1 || end < start) {
    throw new Error(`docs:layout: ${file} has no "${LAYOUT_START}" ... "${LAYOUT_END}" markers`);
  }
  return `${text.slice(0, start + LAYOUT_START.length)}\n\n${block}\n\n${text.slice(end)}`;
}

/** What docs/development.md should hold: its text with the layout written from the tree. */
export function generatedLayoutDoc(
  root: string = repoRoot(),
  descriptions: Readonly<Record<string, string>> = FOLDER_DESCRIPTIONS,
): { file: string; current: string; generated: string } {
  const file = path.join(root, LAYOUT_FILE);
  const current = existsSync(file) ? readFileSync(file, "utf8") : "";
  return { file, current, generated: withLayout(current, renderLayout(root, descriptions), file) };
}

const isMain =
  process.argv[1] && path.resolve(process.argv[1]).endsWith(path.join("scripts", "docs-layout.js"));
if (isMain) {
  try {
    const { file, current, generated } = generatedLayoutDoc();
    if (process.argv.includes("--check")) {
      if (current !== generated) {
        process.stderr.write(
          `docs:layout: ${LAYOUT_FILE}'s layout is out of date (run npm run docs:layout)\n`,
        );
        process.exit(1);
      }
      process.stderr.write(`docs:layout: ${LAYOUT_FILE}'s layout is up to date\n`);
    } else {
      writeFileSync(file, generated);
      process.stderr.write(`docs:layout: wrote the layout of ${LAYOUT_FILE}\n`);
    }
  } catch (error) {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(2);
  }
}
