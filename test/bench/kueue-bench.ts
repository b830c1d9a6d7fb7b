// `npm run bench:kueue [-- --quick] [-- --rounds=N] [-- --results-file=F]`: a run through Kueue
// (issue 43) on a real node of its own (containerd under Kubernetes' kubelet, real Kueue beside the
// API server; root, and no other real node running: take /tmp/real-node.lock), against a
// Kueue-managed plain pod in the same run, rounds interleaved, printed as a ratio:
//   kueue_start: pod creation (seen by a watch) -> first line of output of the first task, a
//     Playbook with spec.queueName (one task, `spin stamp`, which prints the time it ran, in the
//     Debian task image) vs a plain pod labelled with the same LocalQueue running the same
//     command in the same image. Both are gated by Kueue's webhook and admitted by Kueue under a
//     ClusterQueue with room for both (the quota is free: no round waits for another). The
//     figure is the median of the rounds' paired ratios (ours / plain pod of the same round),
//     with its p10..p90, and each side's median; target <= 1.1.
// Each pod's admission (its creation to the watch seeing its scheduling gates gone) is printed
// too: Kueue's share of each side's start.
import { appendFileSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { CoreV1Api, CustomObjectsApi, KubeConfig, type V1Pod, Watch } from "@kubernetes/client-node";
import { pino } from "pino";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { loadControllerConfig } from "../../src/controller/config.js";
import { PlaybookController } from "../../src/controller/controller.js";
import { makeClients } from "../../src/runtime/kube-config.js";
import { startDevCluster } from "../harness/dev-cluster.js";
import {
  clusterQueue,
  KUEUE_GROUP,
  KUEUE_VERSION,
  localQueue,
  MANAGED_LABEL,
  QUEUE_NAME_LABEL,
  resourceFlavor,
} from "../harness/kueue.js";
import { waitFor } from "../harness/processes.js";
import { projectImageArchive, projectImageName } from "../harness/real-node/images.js";
import { SPIN, TASK_IMAGES, taskImageArchive } from "../harness/task-images.js";
import { createBenchNamespace } from "./bench-namespace.js";
import { median, meetsTarget, percentile, ratio } from "./stats.js";

const args = new Map(process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=") as [string, string]));
const quick = args.has("quick");
const ROUNDS = Number(args.get("rounds") ?? (quick ? 3 : 20));
const RESULTS_FILE = args.get("results-file");
const TARGET = "<= 1.1";
const NAMESPACE = "bench-kueue";
const QUEUE = "bench";

const log = (message: string) => process.stderr.write(`bench:kueue: ${message}\n`);
/** p10..p90 of a sample, for the note. */
const spread = (values: number[], digits = 0) =>
  `p10 ${percentile(values, 10).toFixed(digits)}, p90 ${percentile(values, 90).toFixed(digits)}`;

/** When a watch on the namespace first saw each pod, and saw it without scheduling gates (epoch ms). */
function watchPods(kubeConfig: KubeConfig, namespace: string) {
  const created = new Map<string, number>();
  const ungated = new Map<string, number>();
  const waiting = new Map<string, (ms: number) => void>();
  let request: { abort(): void } | undefined;
  const started = new Watch(kubeConfig)
    .watch(
      `/api/v1/namespaces/${namespace}/pods`,
      {},
      (type: string, pod: V1Pod) => {
        const name = pod.metadata?.name;
        if (!name || type === "DELETED") return;
        const now = Date.now();
        if (!created.has(name)) {
          created.set(name, now);
          waiting.get(name)?.(now);
        }
        if (!ungated.has(name) && (pod.spec?.schedulingGates ?? []).length === 0) ungated.set(name, now);
      },
      () => {},
    )
    .then((r) => {
      request = r;
    });
  return {
    started,
    created: (name: string): Promise<number> => {
      const at = created.get(name);
      if (at !== undefined) return Promise.resolve(at);
      return new Promise((resolve) => waiting.set(name, resolve));
    },
    /** ms from the pod's creation until its gates were seen gone. */
    admittedAfter: (name: string): number => {
      const from = created.get(name);
      const to = ungated.get(name);
      if (from === undefined || to === undefined)
        throw new Error(`pod ${name}: its gates were never seen gone`);
      return to - from;
    },
    stop: () => request?.abort(),
  };
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error("a real node needs root");
  const stateDir = mkdtempSync(path.join(os.tmpdir(), "bench-kueue-cluster-"));
  const project = await projectImageArchive(log);
  if (!project) throw new Error(`${projectImageName()} is not built: npm run image:build`);
  const cluster = await startDevCluster({
    stateDir,
    daemon: false,
    startController: false,
    node: "real",
    log,
    images: [project, await taskImageArchive("debian", log)],
    kueue: true,
  });
  let controller: PlaybookController | undefined;
  let done: Promise<void> | undefined;
  const ours: number[] = [];
  const reference: number[] = [];
  const ratios: number[] = [];
  const admittedOurs: number[] = [];
  const admittedReference: number[] = [];
  // The same two, neither through Kueue: what Kueue adds to each.
  const oursDirect: number[] = [];
  const referenceDirect: number[] = [];
  const throughKueue: number[] = [];
  const plainThroughKueue: number[] = [];
  try {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(cluster.state.kubeconfig);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const custom = kubeConfig.makeApiClient(CustomObjectsApi);
    const namespace = NAMESPACE;
    await createBenchNamespace(core, custom, namespace);
    // A quota far above what one round's two pods ask (150m and 100m): admission never waits.
    const kueueObject = (plural: string, body: Record<string, unknown>) =>
      custom.createClusterCustomObject({ group: KUEUE_GROUP, version: KUEUE_VERSION, plural, body });
    await kueueObject("resourceflavors", resourceFlavor("bench"));
    await kueueObject("clusterqueues", clusterQueue("bench", { flavor: "bench", cpu: "16", memory: "32Gi" }));
    await custom.createNamespacedCustomObject({
      group: KUEUE_GROUP,
      version: KUEUE_VERSION,
      namespace,
      plural: "localqueues",
      body: localQueue(QUEUE, namespace, "bench"),
    });
    await waitFor(
      `LocalQueue ${namespace}/${QUEUE} to be Active`,
      async () => {
        const queue = (await custom.getNamespacedCustomObject({
          group: KUEUE_GROUP,
          version: KUEUE_VERSION,
          namespace,
          plural: "localqueues",
          name: QUEUE,
        })) as { status?: { conditions?: { type: string; status: string }[] } };
        return queue.status?.conditions?.some((c) => c.type === "Active" && c.status === "True")
          ? true
          : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );

    // The controller as a platform team running Kueue runs it: reading Kueue's Workloads.
    const config = loadControllerConfig(
      {
        namespaces: namespace,
        metricsAddress: "127.0.0.1:0",
        leaderElection: false,
        runnerImage: projectImageName(),
        identity: "bench-kueue",
        kueue: true,
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

    const pods = watchPods(kubeConfig, namespace);
    await pods.started;
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
    const stampIn = (logs: string): number => {
      const match = /stamp (\d+)/.exec(logs);
      if (!match) throw new Error(`no stamp line in:\n${logs}`);
      return Number(match[1]);
    };
    /** A queued side must have gone through Kueue, a direct one not, or the ratios say nothing of it. */
    const checkManaged = (pod: V1Pod, queued: boolean) => {
      const labels = pod.metadata?.labels ?? {};
      const managed = labels[MANAGED_LABEL] === "true" && labels[QUEUE_NAME_LABEL] === QUEUE;
      if (managed !== queued)
        throw new Error(
          `pod ${pod.metadata?.name} ${queued ? "did not go" : "went"} through Kueue's queue ${QUEUE}: labels ${JSON.stringify(labels)}`,
        );
    };

    let counter = 0;
    const startOurs = async (queued = true): Promise<{ firstLine: number; admitted: number }> => {
      const name = `run-${++counter}`;
      await custom.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
        body: {
          apiVersion: `${GROUP}/${VERSION}`,
          kind: "Playbook",
          metadata: { name },
          spec: {
            ...(queued ? { queueName: QUEUE } : {}),
            ceiling: "2m",
            tasks: [{ name: "first", image: TASK_IMAGES.debian, run: `${SPIN} stamp` }],
          },
        },
      });
      const pod = `${name}-1`;
      const created = await pods.created(pod);
      checkManaged(await podEnded(pod), queued);
      return { firstLine: stampIn(await logsOf(pod, "runner")) - created, admitted: pods.admittedAfter(pod) };
    };
    const startReference = async (queued = true): Promise<{ firstLine: number; admitted: number }> => {
      const name = `plain-${++counter}`;
      await core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name, labels: queued ? { [QUEUE_NAME_LABEL]: QUEUE } : {} },
          spec: {
            restartPolicy: "Never",
            securityContext: { runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true },
            containers: [
              {
                name: "main",
                image: TASK_IMAGES.debian,
                command: [SPIN, "stamp"],
                // What a task container of ours asks by default (docs/kueue.md).
                resources: { requests: { cpu: "100m", memory: "256Mi" } },
              },
            ],
          },
        },
      });
      const created = await pods.created(name);
      checkManaged(await podEnded(name), queued);
      return { firstLine: stampIn(await logsOf(name, "main")) - created, admitted: pods.admittedAfter(name) };
    };

    // A warm-up of each: the first containers of an image on a node are slower (snapshots unpacked).
    log("warming up");
    await startOurs();
    await startReference();
    await startOurs(false);
    await startReference(false);
    type Start = Awaited<ReturnType<typeof startOurs>>;
    const sides: (() => Promise<Start>)[] = [
      () => startOurs(),
      () => startReference(),
      () => startOurs(false),
      () => startReference(false),
    ];
    for (let round = 1; round <= ROUNDS; round++) {
      // The order turns each round, so no side always follows another's teardown.
      const got: Start[] = [];
      for (let k = 0; k < sides.length; k++) {
        const side = (round + k) % sides.length;
        got[side] = await (sides[side] as () => Promise<Start>)();
      }
      const [a, b, c, d] = got as [Start, Start, Start, Start];
      ours.push(a.firstLine);
      reference.push(b.firstLine);
      oursDirect.push(c.firstLine);
      referenceDirect.push(d.firstLine);
      admittedOurs.push(a.admitted);
      admittedReference.push(b.admitted);
      ratios.push(a.firstLine / b.firstLine);
      throughKueue.push(a.firstLine / c.firstLine);
      plainThroughKueue.push(b.firstLine / d.firstLine);
      log(
        `round ${round}: ours ${a.firstLine} ms (admitted after ${a.admitted}), plain pod ${b.firstLine} ms (admitted after ${b.admitted}), ratio ${ratios.at(-1)?.toFixed(2)}; without Kueue: ours ${c.firstLine} ms, plain pod ${d.firstLine} ms`,
      );
    }
    pods.stop();
  } finally {
    controller?.stop();
    await done?.catch(() => {});
    await cluster.stop();
  }
  const pairedRatio = median(ratios);
  const comparison = {
    name: "kueue_start",
    ours: median(ours),
    reference: median(reference),
    unit: "ms",
    ratio: pairedRatio,
    target: TARGET,
    note: `pod creation (watch) -> first task's first line through Kueue (quota free), a Playbook with queueName vs a plain pod in the same LocalQueue running the same command in the same image; median of ${ROUNDS} paired ratios (${spread(ratios, 2)}); ours ${spread(ours)} ms, plain ${spread(reference)} ms (ratio of the medians ${ratio(median(ours), median(reference))?.toFixed(2)}); Kueue's admission (creation -> gates gone) median ${median(admittedOurs)} ms ours, ${median(admittedReference)} ms plain`,
  };
  // What going through Kueue adds to a run: ours queued against ours not, beside the same for the plain pod.
  const kueueCost = median(throughKueue);
  const overhead = {
    name: "kueue_start_over_direct",
    ours: median(ours),
    reference: median(oursDirect),
    unit: "ms",
    ratio: kueueCost,
    target: TARGET,
    note: `the same Playbook with queueName against without (not gated, Kueue never sees it): what Kueue adds to a run's start; median of ${ROUNDS} paired ratios (${spread(throughKueue, 2)}); for the plain pod, with its queue label against without: ${median(plainThroughKueue).toFixed(2)} (${spread(plainThroughKueue, 2)}); without Kueue ours ${median(oursDirect)} ms against the plain pod's ${median(referenceDirect)} ms (${ratio(median(oursDirect), median(referenceDirect))?.toFixed(2)}): the pod's layout, not Kueue`,
  };
  for (const entry of [comparison, overhead]) {
    if (RESULTS_FILE) appendFileSync(RESULTS_FILE, `${JSON.stringify(entry)}\n`);
    process.stdout.write(
      `${entry.name}: ours ${entry.ours} ms, reference ${entry.reference} ms, ratio ${entry.ratio.toFixed(2)} (target ${TARGET}) ${meetsTarget(entry.ratio, TARGET) ? "met" : "NOT met"}\n  ${entry.note}\n`,
    );
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    log(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
