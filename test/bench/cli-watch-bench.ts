// `npm run bench:cli-watch [-- --quick] [-- --rounds=N] [-- --results-file=F]`: the cluster CLI
// (issue 21) on a real node of its own (containerd under Kubernetes' kubelet; root, and no other
// real node running: take /tmp/playbook-real-node.lock), against what a user would type without it,
// in the same run and interleaved, printed as a ratio:
//   cli_submit_watch_hello: from the command's start to its exit, `playbook submit -f hello.yaml
//     --watch` (the run followed to its end, its output streamed) vs `kubectl apply -f hello.yaml`
//     followed by `kubectl wait --for=condition=Succeeded`. Medians; target <= 1.0.
// Both sides run examples/hello.yaml under another name each round, on the same controller. A
// watch of the bench's own splits each run in three: the command's start to its Playbook's
// creation (the client's start and its create), the run itself (the controller and the node, the
// same for both), and the terminal condition to the command's exit (the client's end).
import { execFile, spawn } from "node:child_process";
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout } from "node:timers/promises";
import { promisify } from "node:util";
import { CoreV1Api, KubeConfig, Watch } from "@kubernetes/client-node";
import { pino } from "pino";
import { z } from "zod";
import { loadControllerConfig } from "../../src/controller/config.js";
import { PlaybookController } from "../../src/controller/controller.js";
import { makeClients } from "../../src/runtime/kube-config.js";
import { repoRoot } from "../harness/binaries.js";
import { startDevCluster } from "../harness/dev-cluster.js";
import { waitFor } from "../harness/processes.js";
import { projectImageArchive, projectImageName } from "../harness/real-node/images.js";
import { median, meetsTarget, ratio } from "./stats.js";

const run = promisify(execFile);
const args = new Map(process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=") as [string, string]));
const quick = args.has("quick");
const ROUNDS = Number(args.get("rounds") ?? (quick ? 3 : 11));
const RESULTS_FILE = args.get("results-file");
const TARGET = "<= 1.0";
const NAMESPACE = "bench-cli";
const CLI = path.join(repoRoot(), "dist", "bin", "playbook.js");

const log = (message: string) => process.stderr.write(`bench:cli-watch: ${message}\n`);

interface Timed {
  from: number;
  to: number;
}

/** Runs a command to its end: when it started and exited (performance.now()), or an error with what it printed. */
function timed(command: string, argv: string[], env: NodeJS.ProcessEnv): Promise<Timed> {
  return new Promise((resolve, reject) => {
    const from = performance.now();
    const child = spawn(command, argv, { env, stdio: ["ignore", "pipe", "pipe"] });
    let printed = "";
    child.stdout.on("data", (chunk: Buffer) => {
      printed += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      printed += chunk.toString();
    });
    child.on("error", reject);
    child.on("close", (code) => {
      const to = performance.now();
      if (code === 0) resolve({ from, to });
      else reject(new Error(`${command} ${argv.join(" ")} exited ${code}:\n${printed}`));
    });
  });
}

const WatchedPlaybook = z.looseObject({
  metadata: z.looseObject({ name: z.string() }),
  status: z
    .looseObject({ conditions: z.array(z.looseObject({ type: z.string(), status: z.string() })).optional() })
    .optional(),
});

/** One run split by the bench's watch (ms): see the head of this file. */
interface Parts {
  create: number;
  run: number;
  end: number;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error("a real node needs root");
  const scratch = mkdtempSync(path.join(os.tmpdir(), "bench-cli-watch-"));
  const project = await projectImageArchive(log);
  if (!project) throw new Error(`${projectImageName()} is not built: npm run image:build`);
  const cluster = await startDevCluster({
    stateDir: path.join(scratch, "cluster"),
    daemon: false,
    startController: false,
    node: "real",
    log,
    images: [project],
  });
  let succeeded = false;
  let controller: PlaybookController | undefined;
  let done: Promise<void> | undefined;
  try {
    const kubeconfig = cluster.state.kubeconfig;
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(kubeconfig);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: NAMESPACE } } });
    await waitFor(
      "the default service account",
      async () => {
        await core.readNamespacedServiceAccount({ namespace: NAMESPACE, name: "default" });
        return true;
      },
      { timeoutMs: 30_000 },
    );
    const config = loadControllerConfig(
      {
        namespaces: NAMESPACE,
        metricsAddress: "127.0.0.1:0",
        leaderElectionNamespace: NAMESPACE,
        leaderElectionId: "playbook-bench-cli-watch",
        leaseDuration: "20s",
        renewDeadline: "15s",
        retryPeriod: "2s",
        runnerImage: projectImageName(),
        identity: "bench-cli-watch",
      },
      {},
    );
    controller = new PlaybookController({
      config,
      clients: makeClients(kubeConfig),
      log: pino({ level: process.env.BENCH_LOG ?? "silent" }, pino.destination(2)),
    });
    done = controller.run();
    done.catch(() => {});

    // When each Playbook was created and when its Succeeded condition was set, as this process saw them.
    const created = new Map<string, number>();
    const ended = new Map<string, number>();
    const watching = await new Watch(kubeConfig).watch(
      `/apis/playbook.dev/v1alpha1/namespaces/${NAMESPACE}/playbooks`,
      {},
      (_type, object: unknown) => {
        const at = performance.now();
        const seen = WatchedPlaybook.safeParse(object);
        if (!seen.success) return;
        const name = seen.data.metadata.name;
        if (!created.has(name)) created.set(name, at);
        const succeeded = seen.data.status?.conditions?.find((condition) => condition.type === "Succeeded");
        if (succeeded && succeeded.status !== "Unknown" && !ended.has(name)) ended.set(name, at);
      },
      () => {},
    );
    // Split once all rounds are over: kubectl wait may exit before this watch has seen the event.
    const timedRuns = {
      ours: [] as (Timed & { name: string })[],
      reference: [] as (Timed & { name: string })[],
    };
    const split = ({ name, from, to }: Timed & { name: string }): Parts => {
      const at = created.get(name) ?? Number.NaN;
      const end = ended.get(name) ?? Number.NaN;
      return { create: at - from, run: end - at, end: to - end };
    };

    // Both sides as a user runs them: the kubeconfig in KUBECONFIG, the namespace as a flag.
    const env = { PATH: process.env.PATH, HOME: scratch, KUBECONFIG: kubeconfig };
    const hello = readFileSync(path.join(repoRoot(), "examples", "hello.yaml"), "utf8");
    let counter = 0;
    const manifest = (name: string): string => {
      const file = path.join(scratch, `${name}.yaml`);
      writeFileSync(file, hello.replace(/^ {2}name: hello$/m, `  name: ${name}`));
      return file;
    };
    const ours = async (): Promise<number> => {
      const name = `ours-${++counter}`;
      const file = manifest(name);
      const run = await timed(process.execPath, [CLI, "submit", "-f", file, "-n", NAMESPACE, "--watch"], env);
      timedRuns.ours.push({ name, ...run });
      return run.to - run.from;
    };
    const reference = async (): Promise<number> => {
      const name = `kubectl-${++counter}`;
      const file = manifest(name);
      const applied = await timed("kubectl", ["apply", "-f", file, "-n", NAMESPACE], env);
      const waited = await timed(
        "kubectl",
        ["wait", "-n", NAMESPACE, "--for=condition=Succeeded", "--timeout=120s", `playbook/${name}`],
        env,
      );
      // The moment between the two commands, the bench's own, is not counted.
      const gap = waited.from - applied.to;
      timedRuns.reference.push({ name, from: applied.from, to: waited.to - gap });
      return applied.to - applied.from + (waited.to - waited.from);
    };
    const said = (one: Parts | undefined) =>
      one ? `create ${Math.round(one.create)}, run ${Math.round(one.run)}, end ${Math.round(one.end)}` : "-";
    log("warming up");
    await ours();
    await reference();
    timedRuns.ours.length = 0;
    timedRuns.reference.length = 0;
    const oursMs: number[] = [];
    const referenceMs: number[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      // Alternating which goes first, so neither always follows the other on a warmer node.
      if (round % 2 === 1) {
        oursMs.push(await ours());
        referenceMs.push(await reference());
      } else {
        referenceMs.push(await reference());
        oursMs.push(await ours());
      }
      log(
        `round ${round}: playbook submit --watch ${Math.round(oursMs.at(-1) ?? 0)} ms, kubectl apply + wait ${Math.round(referenceMs.at(-1) ?? 0)} ms`,
      );
    }
    const oursMedian = Math.round(median(oursMs));
    const referenceMedian = Math.round(median(referenceMs));
    const comparison = {
      name: "cli_submit_watch_hello",
      ours: oursMedian,
      reference: referenceMedian,
      unit: "ms",
      ratio: ratio(oursMedian, referenceMedian),
      target: TARGET,
      note: `command start -> exit for examples/hello.yaml: playbook submit --watch vs kubectl apply + kubectl wait --for=condition=Succeeded, same cluster and controller, interleaved; median of ${ROUNDS}`,
    };
    if (RESULTS_FILE) appendFileSync(RESULTS_FILE, `${JSON.stringify(comparison)}\n`);
    await setTimeout(500);
    const parts = { ours: timedRuns.ours.map(split), reference: timedRuns.reference.map(split) };
    parts.ours.forEach((one, i) => {
      log(`round ${i + 1} in parts: ours ${said(one)}; reference ${said(parts.reference[i])}`);
    });
    const medians = (of: Parts[]) =>
      (["create", "run", "end"] as const)
        .map((part) => `${part} ${Math.round(median(of.map((one) => one[part])))}`)
        .join(", ");
    process.stdout.write(
      `${comparison.name}: ours ${comparison.ours} ms, reference ${comparison.reference} ms, ratio ${comparison.ratio?.toFixed(2) ?? "-"} (target ${TARGET}) ${meetsTarget(comparison.ratio, TARGET) ? "met" : "NOT met"}\n  ${comparison.note}\n` +
        `  medians of the parts (ms): ours ${medians(parts.ours)}; reference ${medians(parts.reference)}\n` +
        "  (create: the command's start to its Playbook's creation; run: to its Succeeded condition; end: to the command's exit)\n",
    );
    watching.abort();
    // The runs the bench made are all over: none may be left for the cluster's stop to find.
    const { stdout } = await run("kubectl", ["get", "playbooks", "-n", NAMESPACE, "-o", "name"], { env });
    log(`${stdout.split("\n").filter(Boolean).length} runs made`);
    succeeded = true;
  } finally {
    controller?.stop();
    await done?.catch(() => {});
    await cluster.stop();
    // The cluster's state and logs (some 70 MB) stay only when the bench failed, to be read.
    if (succeeded) rmSync(scratch, { recursive: true, force: true });
    else log(`the cluster's logs are in ${path.join(scratch, "cluster", "logs")}`);
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    log(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
