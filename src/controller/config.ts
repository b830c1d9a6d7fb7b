// The controller's configuration: flags win over env (PLAYBOOK_*), env over defaults; validated
// with zod so a bad value stops the process at start with the flag it came from.

import { readFileSync } from "node:fs";
import { z } from "zod";
import { CONTROLLER_LIMIT_FLAGS } from "../api/controller-limits.js";
import { formatDuration, parseDuration } from "../api/duration.js";
import { DEFAULT_MAX_PREEMPTIONS } from "../api/limits.js";
import { MAX_PREEMPTIONS_LIMIT } from "../api/playbook.js";
import { imagePatternMessage, isImagePattern } from "../api/policy.js";
import { WATCH_SECONDS_MIN } from "../runtime/informer.js";
import { AGENT_DELIVERY_SETTINGS } from "./pods/agent-delivery.js";
import { USER_NAMESPACES_SETTINGS } from "./pods/user-namespaces.js";

/** The shortest --progress-interval: a read of every running run's log more often than this is no news. */
const MIN_PROGRESS_INTERVAL_MS = 1000;

const SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/** The namespace this process runs in, when it runs in a pod. */
function ownNamespace(): string {
  try {
    return readFileSync(SERVICE_ACCOUNT_NAMESPACE, "utf8").trim() || "default";
  } catch {
    return "default";
  }
}

const Duration = z.string().transform((text, ctx) => {
  try {
    return parseDuration(text);
  } catch (error) {
    ctx.addIssue({ code: "custom", message: (error as Error).message });
    return z.NEVER;
  }
});

const Address = z
  .string()
  .regex(/^([^:]*):(\d{1,5})$/, "must be HOST:PORT, e.g. :8080 or 127.0.0.1:8080 (port 0 picks a free one)");

// A Kubernetes label key, as apimachinery's IsQualifiedName checks it: [prefix/]name.
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LabelKey = z.string().refine(
  (key) => {
    if (key === "") return true;
    const slash = key.lastIndexOf("/");
    const [prefix, name] = slash < 0 ? [undefined, key] : [key.slice(0, slash), key.slice(slash + 1)];
    if (name.length > 63 || !LABEL_NAME.test(name)) return false;
    return prefix === undefined || (prefix.length <= 253 && DNS_SUBDOMAIN.test(prefix));
  },
  {
    error: (issue) =>
      `${JSON.stringify(issue.input)} is not a label key: [prefix/]name, a name of at most 63 letters, digits, '-', '_' or '.' starting and ending alphanumeric, and an optional DNS subdomain prefix, e.g. app.kubernetes.io/name`,
  },
);

/** A comma-separated list (env, flag) or an array (tests): trimmed, empties dropped. */
const List = z
  .union([z.array(z.string()), z.string()])
  .transform((v) => (Array.isArray(v) ? v : v.split(",")).map((s) => s.trim()).filter((s) => s !== ""));

const Bool = z.union([
  z.boolean(),
  z.enum(["true", "false", "1", "0"]).transform((v) => v === "true" || v === "1"),
]);

export const ControllerConfigSchema = z
  .strictObject({
    defaultCeiling: Duration.prefault(CONTROLLER_LIMIT_FLAGS.defaultCeiling),
    maxCeiling: Duration.prefault(CONTROLLER_LIMIT_FLAGS.maxCeiling),
    defaultStall: Duration.prefault(CONTROLLER_LIMIT_FLAGS.defaultStall),
    defaultKillGrace: Duration.prefault(CONTROLLER_LIMIT_FLAGS.defaultKillGrace),
    /** The longest killGrace accepted: what a run may take after its ceiling is bounded too. */
    maxKillGrace: Duration.prefault(CONTROLLER_LIMIT_FLAGS.maxKillGrace),
    /** From a pod's creation until its runner starts, when neither the spec nor a policy says. */
    defaultStartTimeout: Duration.prefault(CONTROLLER_LIMIT_FLAGS.defaultStartTimeout),
    /** The finally tasks' ceiling when neither the spec nor a policy says. */
    defaultFinallyCeiling: Duration.prefault(CONTROLLER_LIMIT_FLAGS.defaultFinallyCeiling),
    /** The longest finallyCeiling accepted: what the finally tasks may add to a run is bounded too. */
    maxFinallyCeiling: Duration.prefault(CONTROLLER_LIMIT_FLAGS.maxFinallyCeiling),
    /** From a pod's creation until Kueue admits it, when neither the spec nor a policy says; absent: none. */
    defaultQueueTimeout: Duration.optional(),
    /** Pods Kueue stops that a run re-creates before the next stop ends it Preempted, when neither the spec nor a policy says. */
    defaultMaxPreemptions: z.coerce
      .number()
      .int()
      .min(0)
      .max(MAX_PREEMPTIONS_LIMIT)
      .default(DEFAULT_MAX_PREEMPTIONS),
    /** The Kueue LocalQueue of a run whose spec and policy name none; absent: such runs bypass Kueue. */
    defaultQueueName: z
      .string()
      .max(63, "must be at most 63 characters (it is a label value)")
      .regex(DNS_SUBDOMAIN, "must be a LocalQueue name (a DNS-1123 subdomain)")
      .optional(),
    /** Read Kueue's Workloads (the RBAC to get, list and watch them comes with it in the chart). */
    kueue: Bool.default(false),
    ttlSecondsAfterFinished: z.coerce.number().int().min(0).default(3600),
    runnerImage: z.string().min(1).default("ghcr.io/playbook-controller/playbook-controller:0.1.0"),
    /** How the agent reaches task containers: auto picks image-volume where every node can mount one. */
    agentDelivery: z.enum(AGENT_DELIVERY_SETTINGS).default("auto"),
    /** Whether run pods get their own user namespace: auto where the API server and every node support it. */
    userNamespaces: z.enum(USER_NAMESPACES_SETTINGS).default("auto"),
    /** Service accounts Playbooks may name in namespaces without a PlaybookPolicy, besides `default`. */
    allowedServiceAccounts: List.pipe(
      z.array(z.string().regex(DNS_SUBDOMAIN, "must list service account names (DNS-1123 subdomains)")),
    ).default([]),
    /** Images Playbooks may name in namespaces without a PlaybookPolicy, besides the runner image: exact, or a prefix ending in `/*`. */
    allowedImages: List.pipe(
      z.array(
        z.string().refine(isImagePattern, { error: (issue) => imagePatternMessage(String(issue.input)) }),
      ),
    ).default([]),
    /** Empty: all namespaces. */
    namespaces: z
      .union([z.array(z.string()), z.string()])
      .transform((v) => (Array.isArray(v) ? v : v.split(",")).map((s) => s.trim()).filter((s) => s !== ""))
      .default([]),
    workers: z.coerce.number().int().min(1).max(64).default(2),
    metricsAddress: Address.default(":8080"),
    leaderElection: Bool.default(true),
    /** Default: the pod's own namespace in a cluster, else "default". */
    leaderElectionNamespace: z.string().min(1).default(ownNamespace),
    leaderElectionId: z.string().min(1).default("playbook-controller"),
    leaseDuration: Duration.prefault("15s"),
    renewDeadline: Duration.prefault("10s"),
    retryPeriod: Duration.prefault("2s"),
    /** How often every cached Playbook is reconciled again, whatever happened. */
    resync: Duration.prefault("10m"),
    /** A watch that delivers nothing (not even a bookmark) for this long is restarted. */
    watchTimeout: Duration.prefault("5m"),
    identity: z.string().min(1).optional(),
    logLevel: z.enum(["trace", "debug", "info", "warn", "error", "fatal", "silent"]).default("info"),
    /** json for log collectors; text is one line per record for people reading `kubectl logs`. */
    logFormat: z.enum(["json", "text"]).default("json"),
    /** A Playbook label whose value becomes a `playbook` metric label; empty: no such label. */
    metricsPlaybookLabel: LabelKey.default(""),
    /** Add a `task` label (the task's name) to the task duration and usage metrics. */
    metricsTaskLabel: Bool.default(false),
    /** How often a running run's progress is read and written at most; 0s: no live progress. */
    progressInterval: Duration.prefault("10s"),
    /**
     * The log archive (docs/log-archive.md): set the bucket to turn it on. Credentials come from
     * the SDK's own env (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), never from a flag.
     */
    logArchiveBucket: z
      .string()
      .regex(
        /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/,
        "must be an S3 bucket name (3 to 63 lower-case letters, digits, '.' or '-')",
      )
      .optional(),
    /** The S3 endpoint, e.g. http://seaweedfs.storage:8333; unset: AWS's own for the region. */
    logArchiveEndpoint: z
      .url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" })
      .optional(),
    /**
     * The store's endpoint as the run's pods reach it, e.g. http://10.87.0.1:8333; the runner's
     * upload URLs are signed for it (SigV4 signs the host). Unset: the endpoint.
     */
    logArchivePodEndpoint: z
      .url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" })
      .optional(),
    logArchiveRegion: z.string().min(1).default("us-east-1"),
    /** Prefix of every key the archive writes, e.g. "playbooks/"; empty: the bucket's root. */
    logArchivePrefix: z
      .string()
      .refine(
        (p) => p === "" || (p.endsWith("/") && !p.startsWith("/")),
        "must be empty or end with '/' (and not start with one)",
      )
      .default(""),
    /** Path-style URLs (http://HOST/BUCKET/KEY): MinIO, SeaweedFS, Ceph RGW. */
    logArchiveForcePathStyle: Bool.default(false),
    /**
     * The log API (docs/log-archive.md#reading-an-archived-log): archived logs served to the API
     * server as the aggregated group logs.playbook.dev, while the archive is on. Its serving
     * certificate and key (PEM files); unset: a self-signed one made at start.
     */
    logApiAddress: Address.default(":8443"),
    logApiCertFile: z.string().min(1).optional(),
    logApiKeyFile: z.string().min(1).optional(),
    /** How long a deleted Playbook's archived objects are retried before it is let go with them left. */
    logArchiveDeleteTimeout: Duration.prefault("10m"),
    /**
     * Who carries an attempt's log into the archive: `runner`, the runner itself through URLs the
     * controller presigns (its pods must reach the store); `follow`, the controller, following the
     * pod's log through the API server (the kubelet's rotation can outrun it).
     */
    logArchiveUpload: z.enum(["runner", "follow"]).default("runner"),
  })
  .superRefine((config, ctx) => {
    if (config.defaultCeiling > config.maxCeiling) {
      ctx.addIssue({
        code: "custom",
        path: ["defaultCeiling"],
        message: "must not be longer than the maximum ceiling",
      });
    }
    if (config.defaultKillGrace > config.maxKillGrace) {
      ctx.addIssue({
        code: "custom",
        path: ["defaultKillGrace"],
        message: `${formatDuration(config.defaultKillGrace)} is longer than the maximum killGrace ${formatDuration(config.maxKillGrace)} (--max-kill-grace)`,
      });
    }
    if (config.defaultFinallyCeiling <= 0) {
      ctx.addIssue({ code: "custom", path: ["defaultFinallyCeiling"], message: "must be longer than 0s" });
    }
    if (config.defaultFinallyCeiling > config.maxFinallyCeiling) {
      ctx.addIssue({
        code: "custom",
        path: ["defaultFinallyCeiling"],
        message: `${formatDuration(config.defaultFinallyCeiling)} is longer than the maximum finallyCeiling ${formatDuration(config.maxFinallyCeiling)} (--max-finally-ceiling)`,
      });
    }
    if (config.watchTimeout <= 2 * WATCH_SECONDS_MIN * 1000) {
      ctx.addIssue({
        code: "custom",
        path: ["watchTimeout"],
        message: `must be longer than ${2 * WATCH_SECONDS_MIN}s, the longest a healthy watch stays open`,
      });
    }
    if (config.defaultStartTimeout <= 0) {
      ctx.addIssue({ code: "custom", path: ["defaultStartTimeout"], message: "must be longer than 0s" });
    }
    if (config.defaultQueueTimeout !== undefined && config.defaultQueueTimeout <= 0) {
      ctx.addIssue({
        code: "custom",
        path: ["defaultQueueTimeout"],
        message: `${formatDuration(config.defaultQueueTimeout)} must be longer than 0s (leave it unset for no queue timeout)`,
      });
    }
    if (config.defaultCeiling <= 0) {
      ctx.addIssue({ code: "custom", path: ["defaultCeiling"], message: "must be longer than 0s" });
    }
    if (config.progressInterval !== 0 && config.progressInterval < MIN_PROGRESS_INTERVAL_MS) {
      ctx.addIssue({
        code: "custom",
        path: ["progressInterval"],
        message: `${formatDuration(config.progressInterval)} is shorter than 1s: give 1s or more, or 0s to turn live progress off`,
      });
    }
    if ((config.logApiCertFile === undefined) !== (config.logApiKeyFile === undefined)) {
      ctx.addIssue({
        code: "custom",
        path: [config.logApiCertFile === undefined ? "logApiCertFile" : "logApiKeyFile"],
        message:
          "give both --log-api-cert-file and --log-api-key-file, or neither (a self-signed certificate)",
      });
    }
    if (config.leaseDuration <= config.renewDeadline) {
      ctx.addIssue({ code: "custom", path: ["leaseDuration"], message: "must be longer than renewDeadline" });
    }
    if (config.renewDeadline <= config.retryPeriod) {
      ctx.addIssue({ code: "custom", path: ["renewDeadline"], message: "must be longer than retryPeriod" });
    }
  });
export type ControllerConfig = z.output<typeof ControllerConfigSchema>;
export type ControllerConfigInput = z.input<typeof ControllerConfigSchema>;

/** Environment variables read for each setting; a flag given on the command line wins. */
export const CONFIG_ENV: Record<keyof ControllerConfigInput, string> = {
  defaultCeiling: "PLAYBOOK_DEFAULT_CEILING",
  maxCeiling: "PLAYBOOK_MAX_CEILING",
  defaultStall: "PLAYBOOK_DEFAULT_STALL",
  defaultKillGrace: "PLAYBOOK_DEFAULT_KILL_GRACE",
  maxKillGrace: "PLAYBOOK_MAX_KILL_GRACE",
  defaultStartTimeout: "PLAYBOOK_DEFAULT_START_TIMEOUT",
  defaultFinallyCeiling: "PLAYBOOK_DEFAULT_FINALLY_CEILING",
  maxFinallyCeiling: "PLAYBOOK_MAX_FINALLY_CEILING",
  defaultQueueTimeout: "PLAYBOOK_DEFAULT_QUEUE_TIMEOUT",
  defaultMaxPreemptions: "PLAYBOOK_DEFAULT_MAX_PREEMPTIONS",
  defaultQueueName: "PLAYBOOK_DEFAULT_QUEUE_NAME",
  kueue: "PLAYBOOK_KUEUE",
  ttlSecondsAfterFinished: "PLAYBOOK_TTL_SECONDS_AFTER_FINISHED",
  runnerImage: "PLAYBOOK_RUNNER_IMAGE",
  agentDelivery: "PLAYBOOK_AGENT_DELIVERY",
  userNamespaces: "PLAYBOOK_USER_NAMESPACES",
  allowedServiceAccounts: "PLAYBOOK_ALLOWED_SERVICE_ACCOUNTS",
  allowedImages: "PLAYBOOK_ALLOWED_IMAGES",
  namespaces: "PLAYBOOK_NAMESPACES",
  workers: "PLAYBOOK_WORKERS",
  metricsAddress: "PLAYBOOK_METRICS_ADDRESS",
  leaderElection: "PLAYBOOK_LEADER_ELECTION",
  leaderElectionNamespace: "PLAYBOOK_LEADER_ELECTION_NAMESPACE",
  leaderElectionId: "PLAYBOOK_LEADER_ELECTION_ID",
  leaseDuration: "PLAYBOOK_LEASE_DURATION",
  renewDeadline: "PLAYBOOK_RENEW_DEADLINE",
  retryPeriod: "PLAYBOOK_RETRY_PERIOD",
  resync: "PLAYBOOK_RESYNC",
  watchTimeout: "PLAYBOOK_WATCH_TIMEOUT",
  identity: "PLAYBOOK_IDENTITY",
  logLevel: "PLAYBOOK_LOG_LEVEL",
  logFormat: "PLAYBOOK_LOG_FORMAT",
  metricsPlaybookLabel: "PLAYBOOK_METRICS_PLAYBOOK_LABEL",
  metricsTaskLabel: "PLAYBOOK_METRICS_TASK_LABEL",
  progressInterval: "PLAYBOOK_PROGRESS_INTERVAL",
  logArchiveBucket: "PLAYBOOK_LOG_ARCHIVE_BUCKET",
  logArchiveEndpoint: "PLAYBOOK_LOG_ARCHIVE_ENDPOINT",
  logArchivePodEndpoint: "PLAYBOOK_LOG_ARCHIVE_POD_ENDPOINT",
  logArchiveRegion: "PLAYBOOK_LOG_ARCHIVE_REGION",
  logArchivePrefix: "PLAYBOOK_LOG_ARCHIVE_PREFIX",
  logArchiveForcePathStyle: "PLAYBOOK_LOG_ARCHIVE_FORCE_PATH_STYLE",
  logApiAddress: "PLAYBOOK_LOG_API_ADDRESS",
  logApiCertFile: "PLAYBOOK_LOG_API_CERT_FILE",
  logApiKeyFile: "PLAYBOOK_LOG_API_KEY_FILE",
  logArchiveDeleteTimeout: "PLAYBOOK_LOG_ARCHIVE_DELETE_TIMEOUT",
  logArchiveUpload: "PLAYBOOK_LOG_ARCHIVE_UPLOAD",
};

export class InvalidConfigError extends Error {}

/** Merges flags over env and validates; throws InvalidConfigError naming each bad setting. */
export function loadControllerConfig(
  flags: Partial<Record<keyof ControllerConfigInput, unknown>>,
  env: NodeJS.ProcessEnv = process.env,
): ControllerConfig {
  const input: Record<string, unknown> = {};
  for (const [key, variable] of Object.entries(CONFIG_ENV)) {
    const value = env[variable];
    if (value !== undefined && value !== "") input[key] = value;
  }
  for (const [key, value] of Object.entries(flags)) {
    if (value !== undefined && key in CONFIG_ENV) input[key] = value;
  }
  const parsed = ControllerConfigSchema.safeParse(input);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => {
      const key = String(issue.path[0] ?? "");
      const variable = CONFIG_ENV[key as keyof ControllerConfigInput];
      const where = variable ? `--${kebab(key)} ($${variable})` : key || "(config)";
      return `${where}: ${issue.message}`;
    });
    throw new InvalidConfigError(`invalid controller configuration\n  ${lines.join("\n  ")}`);
  }
  return parsed.data;
}

export { limitDefaults } from "../api/controller-limits.js";

export function kebab(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

export function parseAddress(address: string): { host: string; port: number } {
  const match = /^([^:]*):(\d{1,5})$/.exec(address);
  if (!match) throw new InvalidConfigError(`bad address ${address}`);
  return { host: match[1] || "0.0.0.0", port: Number(match[2]) };
}
