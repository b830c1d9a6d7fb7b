// `npm run bench:images [-- --quick] [-- --rounds=N] [-- --start-rounds=N] [-- --kill-rounds=N (0: none)]
// [-- --trace] [-- --restricted-reference] [-- --user-namespaces-only] [-- --results-file=F]`: tasks in their own
// images (issue 20) on a real node of their own (containerd under Kubernetes' kubelet; root, and no
// other real node running: take /tmp/playbook-real-node.lock), each against a reference measured
// in the same run, printed as ratios:
//   task_image_start (per way the agent gets into the task containers, issue 32: image-volume,
//     what --agent-delivery auto picks on the node's containerd 2.x, and post-start, forced): pod
//     creation (seen by a watch) -> first line of output of the first task, a Playbook with tasks
//     in three images, vs a plain pod running the same command (`spin stamp`, which prints the time
//     it ran) in the same image on the same node, and (`_vs_layout`) vs a pod of our pods' shape
//     with nothing of ours (a sleeping first container and a second running the same command,
//     both restricted). Medians, with the spread (p10..p90).
//   task_image_start_user_namespaces (issue 56): the same start of the same Playbook (agent by
//     image-volume), its pod in a user namespace of its own (--user-namespaces auto, which takes
//     them on the node's containerd 2.x with runc 1.2+; the bench checks hostUsers) vs in the
//     node's (--user-namespaces off), rounds interleaved. Medians, with the spread.
//   task_image_kill_p99_100procs: a 100-process tree in a task container (Debian image), its task
//     timeout passed -> every process dead, vs GNU `timeout -s KILL` of the same tree in a plain
//     pod of that image. Each from its own deadline: ours, the task's start in the runner's report
//     (ms; the runner arms its timer there, before it asks the agent for the leader, which starts
//     some ms later) + the timeout; timeout's, the tree leader's start + the timeout (it arms its
//     timer just before it forks the leader). Each errs against ours: the report's start is a
//     little before the runner's timer starts, timeout's timer a little before its leader. Death
//     is seen from this machine by `spin watch`, which polls the 100 pids' /proc/PID/stat every
//     200 us. p99 (nearest rank) of each.
import { execFile } from "node:child_process";
import { appendFileSync, mkdtempSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { CoreV1Api, CustomObjectsApi, KubeConfig, type V1Pod, Watch } from "@kubernetes/client-node";
import { pino } from "pino";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { decodeReport } from "../../src/api/report.js";
import { loadControllerConfig } from "../../src/controller/config.js";
import { PlaybookController } from "../../src/controller/controller.js";
import { makeClients } from "../../src/runtime/kube-config.js";
import { repoRoot, toolsBinDir } from "../harness/binaries.js";
import { startDevCluster } from "../harness/dev-cluster.js";
import { waitFor } from "../harness/processes.js";
import { projectImageArchive, projectImageName } from "../harness/real-node/images.js";
import { SPIN, TASK_IMAGE_KINDS, TASK_IMAGES, taskImageArchive } from "../harness/task-images.js";
import { createBenchNamespace } from "./bench-namespace.js";
import { type ContainerEvents, watchContainerEvents } from "./container-events.js";
import { median, meetsTarget, percentile, ratio } from "./stats.js";

const run = promisify(execFile);
const args = new Map(process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=") as [string, string]));
const quick = args.has("quick");
const START_ROUNDS = Number(args.get("start-rounds") ?? args.get("rounds") ?? (quick ? 2 : 30));
/** `--user-namespaces-only`: task_image_start_user_namespaces alone (no layouts, no kills). */
const USER_NAMESPACES_ONLY = args.has("user-namespaces-only");
const KILL_ROUNDS = USER_NAMESPACES_ONLY
  ? 0
  : Number(args.get("kill-rounds") ?? args.get("rounds") ?? (quick ? 3 : 200));
/** The layouts measured, each with its controller setting and its target ratio. */
const LAYOUTS = [
  // layoutTarget: against the two-container restricted pod (issue 45: <= 1.1 for the default
  // delivery); post-start's copy of the agent is a cost of its own, so its is looser.
  { delivery: "image-volume", setting: "auto", target: "<= 1.2", layoutTarget: "<= 1.1" },
  { delivery: "post-start", setting: "post-start", target: "<= 1.6", layoutTarget: "<= 1.5" },
] as const;

/** The start with the pod in a user namespace of its own against without it (issue 56). */
const USER_NAMESPACES_TARGET = "<= 1.1";

/** p10..p90 of a sample, for the notes. */
const spread = (values: number[]) => `p10 ${percentile(values, 10)}, p90 ${percentile(values, 90)}`;
const RESULTS_FILE = args.get("results-file");
/** `--trace`: each start round's steps from containerd's events (when each container was created and started). */
const TRACE = args.has("trace");
const RESTRICTED_REFERENCE = args.has("restricted-reference");
const TIMEOUT_S = 3;
const PROCS = 100;

const log = (message: string) => process.stderr.write(`bench:images: ${message}\n`);

interface Comparison {
  name: string;
  ours: number;
  reference: number;
  unit: string;
  ratio: number | null;
  target: string;
  note: string;
}
const results: Comparison[] = [];
function record(comparison: Comparison): void {
  results.push(comparison);
  if (RESULTS_FILE) appendFileSync(RESULTS_FILE, `${JSON.stringify(comparison)}\n`);
}

/** spin built for this machine (`spin watch` sees the node's processes: containerd runs them here). */
async function hostSpin(): Promise<string> {
  const binary = path.join(mkdtempSync(path.join(os.tmpdir(), "bench-images-")), "spin");
  await run("cc", ["-O2", "-o", binary, path.join(repoRoot(), "test", "harness", "real-node", "spin.c")]);
  return binary;
}

function isSpin(pid: string): boolean {
  try {
    return /^(?:[^\0]*\/)?spin\0/.test(readFileSync(`/proc/${pid}/cmdline`, "latin1"));
  } catch {
    return false;
  }
}

/** Pods' first sight by a watch on the namespace, in epoch ms, by name. */
function watchPods(kubeConfig: KubeConfig, namespace: string) {
  const seen = new Map<string, number>();
  const waiting = new Map<string, (ms: number) => void>();
  let request: { abort(): void } | undefined;
  const started = new Watch(kubeConfig)
    .watch(
      `/api/v1/namespaces/${namespace}/pods`,
      {},
      (type: string, pod: V1Pod) => {
        const name = pod.metadata?.name;
        if (type !== "ADDED" || !name || seen.has(name)) return;
        const now = Date.now();
        seen.set(name, now);
        waiting.get(name)?.(now);
      },
      () => {},
    )
    .then((r) => {
      request = r;
    });
  return {
    started,
    created: (name: string): Promise<number> => {
      const at = seen.get(name);
      if (at !== undefined) return Promise.resolve(at);
      return new Promise((resolve) => waiting.set(name, resolve));
    },
    stop: () => request?.abort(),
  };
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error("a real node needs root");
  const stateDir = mkdtempSync(path.join(os.tmpdir(), "bench-images-cluster-"));
  const project = await projectImageArchive(log);
  if (!project) throw new Error(`${projectImageName()} is not built: npm run image:build`);
  const images = [project];
  for (const kind of TASK_IMAGE_KINDS) images.push(await taskImageArchive(kind, log));
  const cluster = await startDevCluster({
    stateDir,
    daemon: false,
    startController: false,
    node: "real",
    log,
    images,
  });
  const spin = await hostSpin();
  let controller: PlaybookController | undefined;
  let done: Promise<void> | undefined;
  try {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(cluster.state.kubeconfig);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const custom = kubeConfig.makeApiClient(CustomObjectsApi);
    const namespace = "bench-images";
    await createBenchNamespace(core, custom, namespace);
    /** A controller of its own per layout: the setting is read once, at its start. */
    const startController = async (
      setting: (typeof LAYOUTS)[number]["setting"],
      userNamespaces: "auto" | "off" = "auto",
    ): Promise<void> => {
      controller?.stop();
      await done?.catch(() => {});
      const config = loadControllerConfig(
        {
          namespaces: namespace,
          metricsAddress: "127.0.0.1:0",
          leaderElection: false,
          runnerImage: projectImageName(),
          identity: `bench-images-${setting}-${userNamespaces}`,
          agentDelivery: setting,
          userNamespaces,
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
    };
    await startController(LAYOUTS[0].setting);
    const pods = watchPods(kubeConfig, namespace);
    await pods.started;
    const socket = cluster.realNode?.containerdSocket;
    if (TRACE && !socket) throw new Error("--trace needs the real node's containerd socket");
    const events: ContainerEvents | undefined =
      TRACE && socket
        ? await watchContainerEvents(path.join(await toolsBinDir("all"), "ctr"), socket)
        : undefined;
    /** One line per pod: each container's creation and start, ms after the pod's creation. */
    const trace = async (pod: string, created: number, firstLine: number): Promise<void> => {
      if (!events) return;
      const containers = [...(await events.ofPod(pod))].sort(
        ([, a], [, b]) => (a.created ?? Number.POSITIVE_INFINITY) - (b.created ?? Number.POSITIVE_INFINITY),
      );
      const at = (ms: number | undefined) => (ms === undefined ? "?" : String(Math.round(ms - created)));
      const steps = containers.map(
        ([name, t]) => `${name} created ${at(t.created)} started ${at(t.started)}`,
      );
      log(`trace ${pod}: ${steps.join(", ")}, first line ${firstLine}`);
    };

    const logsOf = async (pod: string, container: string): Promise<string> => {
      const text = await core.readNamespacedPodLog({ namespace, name: pod, container });
      return typeof text === "string" ? text : String(text);
    };
    const podEnded = (name: string) =>
      waitFor(
        `pod ${name} to end`,
        async () => {
          const pod = await core.readNamespacedPod({ namespace, name });
          return pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed" ? pod : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 200 },
      );
    const createPlaybook = (name: string, spec: object) =>
      custom.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
        body: { apiVersion: `${GROUP}/${VERSION}`, kind: "Playbook", metadata: { name }, spec },
      });
    /**
     * The reference. `--restricted-reference` gives it what restricted Pod Security asks (as our
     * pods have: RuntimeDefault seccomp, no capability, no privilege escalation), to see what
     * that alone costs a container's start; the targets are against the plain pod.
     */
    const plainPod = (name: string, command: string[]) =>
      core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name },
          spec: {
            restartPolicy: "Never",
            securityContext: {
              runAsUser: 1000,
              runAsGroup: 1000,
              runAsNonRoot: true,
              ...(RESTRICTED_REFERENCE ? { seccompProfile: { type: "RuntimeDefault" } } : {}),
            },
            containers: [
              {
                name: "main",
                image: TASK_IMAGES.debian,
                command,
                ...(RESTRICTED_REFERENCE
                  ? { securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } } }
                  : {}),
              },
            ],
          },
        },
      });
    /**
     * The layout's own reference: our pods' shape with nothing of ours in it, a sleeping first
     * container (in the runner's image, where our pods have the runner) and a second running the
     * task's command, both restricted as our pods are. Against it the start shows what the runner
     * and the agent cost over the layout itself.
     */
    const restricted = { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } };
    const layoutPod = (name: string, command: string[]) =>
      core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name },
          spec: {
            restartPolicy: "Never",
            securityContext: {
              runAsUser: 1000,
              runAsGroup: 1000,
              runAsNonRoot: true,
              seccompProfile: { type: "RuntimeDefault" },
            },
            containers: [
              {
                name: "first",
                image: projectImageName(),
                command: ["sleep", "600"],
                securityContext: restricted,
              },
              { name: "task", image: TASK_IMAGES.debian, command, securityContext: restricted },
            ],
          },
        },
      });
    const containerEnded = (name: string, container: string) =>
      waitFor(
        `container ${container} of pod ${name} to end`,
        async () => {
          const pod = await core.readNamespacedPod({ namespace, name });
          const status = pod.status?.containerStatuses?.find((c) => c.name === container);
          return status?.state?.terminated ? pod : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 200 },
      );
    const stampIn = (logs: string): number => {
      const match = /stamp (\d+)/.exec(logs);
      if (!match) throw new Error(`no stamp line in:\n${logs}`);
      return Number(match[1]);
    };

    // A warm-up of each: the first containers of an image on a node are slower (snapshots unpacked).
    let counter = 0;
    const startOurs = async (): Promise<number> => {
      const name = `start-${++counter}`;
      await createPlaybook(name, {
        ceiling: "2m",
        tasks: [
          { name: "first", image: TASK_IMAGES.debian, run: `${SPIN} stamp` },
          { name: "second", image: TASK_IMAGES.musl, run: `${SPIN} hello` },
          { name: "third", image: TASK_IMAGES.static, run: `${SPIN} hello` },
        ],
      });
      const pod = `${name}-1`;
      const created = await pods.created(pod);
      await podEnded(pod);
      const firstLine = stampIn(await logsOf(pod, "runner")) - created;
      await trace(pod, created, firstLine);
      return firstLine;
    };
    const startReference = async (): Promise<number> => {
      const name = `plain-start-${++counter}`;
      await plainPod(name, [SPIN, "stamp"]);
      const created = await pods.created(name);
      await podEnded(name);
      const firstLine = stampIn(await logsOf(name, "main")) - created;
      await trace(name, created, firstLine);
      return firstLine;
    };
    const startLayoutReference = async (): Promise<number> => {
      const name = `layout-start-${++counter}`;
      await layoutPod(name, [SPIN, "stamp"]);
      const created = await pods.created(name);
      await containerEnded(name, "task");
      const firstLine = stampIn(await logsOf(name, "task")) - created;
      await trace(name, created, firstLine);
      // Its first container sleeps on: not left to hold the node's resources.
      await core.deleteNamespacedPod({ namespace, name, gracePeriodSeconds: 0 });
      return firstLine;
    };
    /** The way the agent got into the task containers of a run's pod, from the pod itself. */
    const deliveryOf = async (pod: string): Promise<string> => {
      const read = await core.readNamespacedPod({ namespace, name: pod });
      const volume = read.spec?.volumes?.find((v) => v.name === "playbook-agent");
      return volume?.image ? "image-volume" : volume?.emptyDir ? "post-start" : "none";
    };
    for (const layout of USER_NAMESPACES_ONLY ? [] : LAYOUTS) {
      await startController(layout.setting);
      log(`warming up (${layout.delivery})`);
      await startOurs();
      const seen = await deliveryOf(`start-${counter}-1`);
      if (seen !== layout.delivery) {
        throw new Error(`--agent-delivery ${layout.setting} built a ${seen} pod, not ${layout.delivery}`);
      }
      await startReference();
      await startLayoutReference();
      const ours: number[] = [];
      const reference: number[] = [];
      const layoutReference: number[] = [];
      for (let round = 1; round <= START_ROUNDS; round++) {
        ours.push(await startOurs());
        reference.push(await startReference());
        layoutReference.push(await startLayoutReference());
        log(
          `task_image_start (${layout.delivery}) round ${round}: ours ${ours.at(-1)} ms, plain pod ${reference.at(-1)} ms, two-container restricted pod ${layoutReference.at(-1)} ms`,
        );
      }
      const startOursMs = median(ours);
      const startRefMs = median(reference);
      record({
        name: `task_image_start_${layout.delivery.replace("-", "_")}`,
        ours: startOursMs,
        reference: startRefMs,
        unit: "ms",
        ratio: ratio(startOursMs, startRefMs),
        target: layout.target,
        note: `pod creation (watch) -> first task's first line, a Playbook in 3 images (agent by ${layout.delivery}) vs a plain pod running the same command in the same image; median of ${START_ROUNDS} (ours ${spread(ours)}; plain ${spread(reference)})`,
      });
      const layoutRefMs = median(layoutReference);
      record({
        name: `task_image_start_${layout.delivery.replace("-", "_")}_vs_layout`,
        ours: startOursMs,
        reference: layoutRefMs,
        unit: "ms",
        ratio: ratio(startOursMs, layoutRefMs),
        target: layout.layoutTarget,
        note: `pod creation (watch) -> first task's first line, as above, vs a pod of the same shape with nothing of ours: a sleeping first container (runner image) and a second running the same command in the same image, both restricted; median of ${START_ROUNDS} (ours ${spread(ours)}; two-container ${spread(layoutReference)})`,
      });
    }
    /** Whether the run's pod was created in a user namespace of its own. */
    const ownUserNamespace = async (pod: string): Promise<boolean> =>
      (await core.readNamespacedPod({ namespace, name: pod })).spec?.hostUsers === false;
    /** One start under each choice, each from a controller started for it: the pod shows which it got. */
    const startUnder = async (userNamespaces: "auto" | "off"): Promise<number> => {
      await startController(LAYOUTS[0].setting, userNamespaces);
      const ms = await startOurs();
      const own = await ownUserNamespace(`start-${counter}-1`);
      if (own !== (userNamespaces === "auto")) {
        throw new Error(
          `--user-namespaces ${userNamespaces} built a pod ${own ? "with" : "without"} hostUsers: false (does the node's runtime report user namespaces?)`,
        );
      }
      return ms;
    };
    if (START_ROUNDS > 0) {
      log("warming up (user namespaces on and off)");
      await startUnder("auto");
      await startUnder("off");
      const own: number[] = [];
      const host: number[] = [];
      for (let round = 1; round <= START_ROUNDS; round++) {
        own.push(await startUnder("auto"));
        host.push(await startUnder("off"));
        log(
          `task_image_start_user_namespaces round ${round}: own user namespace ${own.at(-1)} ms, the node's ${host.at(-1)} ms`,
        );
      }
      record({
        name: "task_image_start_user_namespaces",
        ours: median(own),
        reference: median(host),
        unit: "ms",
        ratio: ratio(median(own), median(host)),
        target: USER_NAMESPACES_TARGET,
        note: `pod creation (watch) -> first task's first line, a Playbook in 3 images (agent by image-volume) in a user namespace of its own (hostUsers: false) vs in the node's, rounds interleaved; median of ${START_ROUNDS} (own ${spread(own)}; node's ${spread(host)})`,
      });
    }
    await startController(LAYOUTS[0].setting);

    /** The 100 pids of the tree with `mark`, once all are up, and its leader's start (epoch ms). */
    const treeOf = async (mark: string): Promise<string[]> =>
      waitFor(
        `the ${PROCS} processes with ${mark}`,
        async () => {
          const { stdout } = await run("pgrep", ["-f", mark]).catch(() => ({ stdout: "" }));
          // The tree's own processes only: not `timeout` (PID 1 of the plain pod, which outlives
          // the group it kills) nor a shell that did not exec.
          const pids = stdout.split("\n").filter((pid) => pid !== "" && isSpin(pid));
          return pids.length >= PROCS ? pids : undefined;
        },
        { timeoutMs: 120_000, intervalMs: 20 },
      );
    const deathOf = async (pids: string[]): Promise<number> => {
      const { stdout } = await run(spin, ["watch", ...pids], { maxBuffer: 1 << 20 });
      const match = /dead (\d+)/.exec(stdout);
      if (!match) throw new Error(`spin watch said: ${stdout}`);
      return Number(match[1]);
    };
    const readyIn = (logs: string): number => {
      const match = /procs ready (\d+)/.exec(logs);
      if (!match) throw new Error(`no "procs ready" line in:\n${logs}`);
      return Number(match[1]);
    };
    /**
     * The runner's own deadline for the task: its start as the runner's report gives it (ms after
     * the run's start), plus the timeout. The runner arms its timer at that start, before it asks
     * the agent to start the leader: the leader's start would put the deadline later by the launch.
     */
    const attemptDeadline = (pod: V1Pod): number => {
      const message = pod.status?.containerStatuses?.find((c) => c.name === "runner")?.state?.terminated
        ?.message;
      const report = decodeReport(message ?? "", 1);
      const startedAfter = report.tasks[0]?.t?.[0];
      if (startedAfter === undefined)
        throw new Error(`no start of the task in the runner's report: ${message}`);
      return Date.parse(report.start) + startedAfter + TIMEOUT_S * 1000;
    };
    const killOurs = async (): Promise<number> => {
      const name = `kill-${++counter}`;
      const mark = `bench-mark-${counter}-${Date.now()}`;
      await createPlaybook(name, {
        ceiling: "2m",
        killGrace: "0s",
        tasks: [
          {
            name: "tree",
            image: TASK_IMAGES.debian,
            run: `${SPIN} procs ${PROCS} ${mark}`,
            timeout: `${TIMEOUT_S}s`,
          },
        ],
      });
      const dead = await deathOf(await treeOf(mark));
      const ended = await podEnded(`${name}-1`);
      return dead - attemptDeadline(ended);
    };
    const killReference = async (): Promise<number> => {
      const name = `plain-kill-${++counter}`;
      const mark = `bench-mark-${counter}-${Date.now()}`;
      await plainPod(name, ["timeout", "-s", "KILL", String(TIMEOUT_S), SPIN, "procs", String(PROCS), mark]);
      const dead = await deathOf(await treeOf(mark));
      await podEnded(name);
      return dead - (readyIn(await logsOf(name, "main")) + TIMEOUT_S * 1000);
    };
    const killsOurs: number[] = [];
    const killsRef: number[] = [];
    for (let round = 1; round <= KILL_ROUNDS; round++) {
      killsOurs.push(await killOurs());
      killsRef.push(await killReference());
      log(
        `task_image_kill round ${round}: ours ${killsOurs.at(-1)} ms, timeout -s KILL ${killsRef.at(-1)} ms`,
      );
    }
    // `--kill-rounds=0` measures the start only.
    if (KILL_ROUNDS > 0) {
      const killOursP99 = percentile(killsOurs, 99);
      const killRefP99 = percentile(killsRef, 99);
      record({
        name: "task_image_kill_p99_100procs",
        ours: killOursP99,
        reference: killRefP99,
        unit: "ms",
        ratio: ratio(killOursP99, killRefP99),
        target: "<= 1.2",
        note: `each side's own deadline (task timeout ${TIMEOUT_S}s) -> all ${PROCS} processes dead, a task container (Debian image) vs GNU timeout -s KILL in a plain pod of that image; p99 of ${KILL_ROUNDS} (medians ${median(killsOurs)} vs ${median(killsRef)} ms; ours ${spread(killsOurs)}; timeout ${spread(killsRef)})`,
      });
    }
    pods.stop();
    events?.stop();
  } finally {
    controller?.stop();
    await done?.catch(() => {});
    await cluster.stop();
  }
  for (const c of results)
    process.stdout.write(
      `${c.name}: ours ${c.ours} ${c.unit}, reference ${c.reference} ${c.unit}, ratio ${c.ratio?.toFixed(2) ?? "-"} (target ${c.target}) ${meetsTarget(c.ratio, c.target) ? "met" : "NOT met"}\n  ${c.note}\n`,
    );
}

main().then(
  () => process.exit(0),
  (error) => {
    log(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
