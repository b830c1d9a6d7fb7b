// `playbook controller`: runs the controller against the cluster in KUBECONFIG (or in-cluster).
import type { Command } from "commander";
// Only the controller needs client-node, pino and prom-client: controller-run.ts loads them when
// it starts, so `playbook run` and the pod runner stay small and quick to start.
import {
  CONFIG_ENV,
  type ControllerConfigInput,
  InvalidConfigError,
  kebab,
  loadControllerConfig,
} from "../controller/config.js";
import { CONTROLLER_DESCRIPTION } from "./program.js";

const FLAG_HELP: Record<keyof ControllerConfigInput, string> = {
  defaultCeiling: "run ceiling when spec.ceiling is not set (default 1h)",
  maxCeiling: "longest spec.ceiling accepted; longer is InvalidSpec (default 24h)",
  defaultStall: "stall limit when spec.stall is not set (default 10m)",
  defaultKillGrace: "killGrace when spec.killGrace is not set (default 10s)",
  maxKillGrace:
    "longest killGrace accepted, so the time from the ceiling to the run's end is bounded too; longer is InvalidSpec (default 5m)",
  defaultStartTimeout:
    "longest a run's pod may take from its creation until its runner starts, when spec.startTimeout is not set (default 5m)",
  defaultFinallyCeiling:
    "the finally tasks' ceiling (counted from the main tasks' end) when spec.finallyCeiling is not set (default 5m)",
  maxFinallyCeiling:
    "longest finallyCeiling accepted, so the time finally tasks add to a run is bounded too; longer is InvalidSpec (default 1h)",
  defaultQueueTimeout:
    "longest a run's pod may wait for Kueue's admission, from its creation, when neither spec.queueTimeout nor the policy says; the run then ends QueueTimeout (default: none)",
  defaultMaxPreemptions:
    "pods Kueue stops (preemption, eviction) that a run re-creates under onPreemption Requeue when neither spec.maxPreemptions nor the policy says; the next stop ends the run Preempted (default 5)",
  defaultQueueName:
    "the Kueue LocalQueue of runs whose spec.queueName and policy name none (default: none, such runs do not go through Kueue)",
  kueue:
    "read Kueue's Workloads (workloads.kueue.x-k8s.io, get/list/watch) to show Kueue's words while a run is queued and to name preemptions (default false)",
  ttlSecondsAfterFinished: "keep pods of finished runs this long when the spec does not say (default 3600)",
  runnerImage:
    "image of the runner container and the agent (and of tasks when neither the Playbook nor the policy names an image)",
  agentDelivery:
    "how the agent reaches task containers: image-volume (the runner image mounted, Kubernetes 1.35+ with containerd 2.1+ or CRI-O 1.31+), post-start (placed by the runner container's postStart hook) or auto (image-volume where the API server and every node's runtime support it) (default auto)",
  userNamespaces:
    "whether run pods get their own user namespace (hostUsers: false): on, off or auto (on where the API server is 1.33+ and every node's runtime reports user namespaces: containerd 2.0+ or CRI-O 1.25+ with runc 1.2+ or crun 1.9+) (default auto)",
  allowedServiceAccounts:
    "comma-separated service accounts Playbooks may name where no PlaybookPolicy says, besides default (default: none)",
  allowedImages:
    "comma-separated images Playbooks may name where no PlaybookPolicy says, besides the runner image; a trailing * matches a prefix (default: none)",
  namespaces: "comma-separated namespaces to watch (default: all)",
  workers: "Playbooks reconciled at the same time (default 2)",
  metricsAddress: "HOST:PORT for /metrics, /healthz and /readyz (default :8080)",
  leaderElection: "elect a leader on a Lease so only one replica reconciles (default true)",
  leaderElectionNamespace: "namespace of the leader Lease (default: its own in a pod, else default)",
  leaderElectionId: "name of the leader Lease (default playbook-controller)",
  leaseDuration: "how long a standby waits for an unrenewed Lease (default 15s)",
  renewDeadline: "how long the leader keeps trying to renew before it stops (default 10s)",
  retryPeriod: "how often the Lease is tried or renewed (default 2s)",
  resync: "reconcile every Playbook again this often (default 10m)",
  watchTimeout: "restart a watch that delivered nothing for this long (default 5m)",
  identity: "this replica's identity in the Lease (default HOSTNAME_PID)",
  logLevel: "trace | debug | info | warn | error (default info)",
  logFormat:
    "json (one object per line, for log collectors) | text (one readable line per record) (default json)",
  metricsPlaybookLabel:
    "a Playbook label (e.g. app.kubernetes.io/name) whose value becomes a `playbook` label on the run, limit, usage and task metrics (default: none)",
  metricsTaskLabel:
    "true: a `task` label, the task's name, on the task duration and usage metrics, for `playbook advise --prometheus` and the headroom panel (default false)",
  progressInterval:
    "read a running run's progress from its runner's log and write status.tasks and status.currentTask at most this often; 0s turns live progress off (default 10s)",
  logArchiveBucket:
    "archive every run's output to this S3 bucket (docs/log-archive.md); credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (default: no archive)",
  logArchiveEndpoint:
    "the S3 endpoint, e.g. http://seaweedfs.storage:8333 (default: AWS's own for the region)",
  logArchivePodEndpoint:
    "the S3 endpoint as the run's pods reach it; the runner's upload URLs are signed for it (default: the endpoint)",
  logArchiveRegion: "the bucket's region (default us-east-1)",
  logArchivePrefix:
    "prefix of every archived key, ending in '/', e.g. playbooks/ (default: the bucket's root)",
  logArchiveForcePathStyle:
    "true: path-style URLs (http://HOST/BUCKET/KEY), as MinIO, SeaweedFS and Ceph RGW take them (default false)",
  logApiAddress:
    "HOST:PORT of the log API, archived logs served to the API server as the aggregated group logs.playbook.dev, while the archive is on (default :8443)",
  logApiCertFile: "the log API's serving certificate, PEM (default: a self-signed one made at start)",
  logApiKeyFile: "the log API's serving key, PEM (with --log-api-cert-file)",
  logArchiveDeleteTimeout:
    "how long a deleted Playbook's archived objects are retried; then it goes with a Warning and its objects left (default 10m)",
  logArchiveUpload:
    "runner: each run's runner uploads its log through URLs the controller presigns (its pods must reach the store); follow: the controller follows the pod's log through the API server (default runner)",
};

export function registerControllerCommand(program: Command): void {
  const command = program.command("controller").description(CONTROLLER_DESCRIPTION);
  for (const [key, help] of Object.entries(FLAG_HELP)) {
    const variable = CONFIG_ENV[key as keyof ControllerConfigInput];
    if (key === "kueue") {
      command.option("--kueue [bool]", `${help} [$${variable}]`);
      continue;
    }
    if (key === "leaderElection") {
      command.option("--leader-election [bool]", `${help} [$${variable}]`);
      command.option("--no-leader-election", "run without leader election (a single replica)");
      continue;
    }
    // A switch: bare, or with a value (--metrics-task-label=false).
    const value = key === "metricsTaskLabel" || key === "logArchiveForcePathStyle" ? "[bool]" : "<value>";
    command.option(`--${kebab(key)} ${value}`, `${help} [$${variable}]`);
  }
  command.action(async (flags: Record<string, unknown>) => {
    await runController(flags);
  });
}

async function runController(flags: Record<string, unknown>): Promise<void> {
  let config: ReturnType<typeof loadControllerConfig>;
  try {
    config = loadControllerConfig(flags);
  } catch (error) {
    if (error instanceof InvalidConfigError) {
      process.stderr.write(`playbook controller: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const { startController } = await import("./controller-run.js");
  await startController(config);
}
