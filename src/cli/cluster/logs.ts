// `playbook logs NAME [-f] [--task T] [--attempt K]`: a run's output, read from its pods' runner
// logs (every attempt's, in order) for as long as the controller keeps the pods, and from the log
// archive (archived-log.ts) once a pod is gone, the same lines either way. --task keeps one task's
// lines, without their `[task] ` prefix; --attempt one attempt's; -f follows until the run ends.
import { EXIT } from "../exit-codes.js";
import { ArchiveUnavailable, readArchivedLog } from "./archived-log.js";
import { type Cluster, ClusterError } from "./connection.js";
import { commandName, namespaceFlag } from "./invoked.js";
import { type ClusterPlaybook, getPlaybook, RESOURCE, terminalReason, watchPlaybook } from "./playbooks.js";
import {
  followRun,
  LogUnavailable,
  podsInStatus,
  podsOfRun,
  type RunPod,
  RunState,
  readPodLog,
  tasksOfPlaybook,
} from "./run-logs.js";

export interface LogsOptions {
  cluster: Cluster;
  name: string;
  follow: boolean;
  task?: string | undefined;
  /** Only this attempt's log. */
  attempt?: number | undefined;
  out: NodeJS.WritableStream;
}

/** The pods of attempts the status counts that no longer exist, named as the controller names them. */
function missingAttempts(name: string, pods: RunPod[], podAttempts: number): RunPod[] {
  const have = new Set(pods.map((pod) => pod.attempt));
  const missing: RunPod[] = [];
  for (let attempt = 1; attempt <= podAttempts; attempt++) {
    if (!have.has(attempt)) missing.push({ name: `${name}-${attempt}`, attempt });
  }
  return missing;
}

function goneError(options: LogsOptions, gone: RunPod[], archiveSaid?: string): ClusterError {
  const { cluster, name } = options;
  const pods = gone.map((pod) => pod.name).join(", ");
  const archive = archiveSaid === undefined ? "" : ` and the log archive has no copy (${archiveSaid})`;
  return new ClusterError(
    `${gone.length === 1 ? `pod ${pods} is` : `pods ${pods} are`} gone${archive}, so the log of ${RESOURCE} ${name} in namespace ${cluster.namespace} cannot be read ` +
      `(deleted, or removed ttlSecondsAfterFinished after the run) (context ${cluster.context}, server ${cluster.server})`,
    EXIT.lost,
  );
}

/** A run's output by task, while it runs and after, across attempts; see the file's comment. */
export async function showLogs(options: LogsOptions): Promise<number> {
  const { cluster, name, out } = options;
  const playbook = await getPlaybook(cluster, name);
  const tasks = tasksOfPlaybook(playbook).map((task) => task.name);
  if (options.task !== undefined && !tasks.includes(options.task)) {
    throw new ClusterError(
      `--task ${options.task}: ${RESOURCE} ${name} in namespace ${cluster.namespace} has no such task (its tasks: ${tasks.join(", ")})`,
      EXIT.invalid,
    );
  }
  const prefix = options.task === undefined ? undefined : `[${options.task}] `;
  const write = (text: string) => {
    if (prefix === undefined) out.write(`${text}\n`);
    else if (text.startsWith(prefix)) out.write(`${text.slice(prefix.length)}\n`);
  };
  // Between attempts, a line that says whose log follows (not with --task: its lines are the task's alone).
  const header = (pod: RunPod) => {
    if (prefix === undefined) out.write(`--- pod ${pod.name} (attempt ${pod.attempt}) ---\n`);
  };
  const { podName } = podsInStatus(playbook);
  // A run that has ended has nothing to follow: its logs are printed whole, from the archive too.
  if (options.follow && terminalReason(playbook) === undefined)
    return followLogs(options, playbook, write, header);
  if (!podName) {
    const condition = playbook.status?.conditions?.find((c) => c.type === "Succeeded");
    const said = condition?.message ? ` (${condition.reason}: ${condition.message})` : "";
    process.stderr.write(
      terminalReason(playbook) === undefined
        ? `playbook: ${name} has no pod yet${said}; \`${commandName()} logs -f ${name}${namespaceFlag(cluster)}\` waits for it\n`
        : `playbook: ${name} ended before any pod ran${said}: there is no log\n`,
    );
    return EXIT.succeeded;
  }
  return printLogs(options, playbook, write, header);
}

/** Every attempt's log in order (or the one --attempt names): its pod's while kept, else the archive's. */
async function printLogs(
  options: LogsOptions,
  playbook: ClusterPlaybook,
  write: (text: string) => void,
  header: (pod: RunPod) => void,
): Promise<number> {
  const { cluster, name } = options;
  const { podAttempts } = podsInStatus(playbook);
  const pods = await podsOfRun(cluster, playbook);
  const every = [...pods, ...missingAttempts(name, pods, podAttempts)].sort((a, b) => a.attempt - b.attempt);
  const chosen =
    options.attempt === undefined ? every : every.filter((pod) => pod.attempt === options.attempt);
  if (chosen.length === 0)
    throw new ClusterError(
      `--attempt ${options.attempt}: ${RESOURCE} ${name} in namespace ${cluster.namespace} has ${podAttempts === 1 ? "attempt 1 only" : `attempts 1 to ${podAttempts}`}`,
      EXIT.invalid,
    );
  const signal = new AbortController().signal;
  const gone: RunPod[] = [];
  let archiveSaid: string | undefined;
  for (const pod of chosen) {
    // Each attempt's header once, before the first of its lines that can be read.
    let headed = false;
    const headOnce = () => {
      if (chosen.length > 1 && !headed) header(pod);
      headed = true;
    };
    if (pods.includes(pod)) {
      headOnce();
      try {
        await readPodLog(cluster, pod.name, { follow: false, signal, onLine: (line) => write(line.text) });
        continue;
      } catch (error) {
        if (!(error instanceof LogUnavailable)) throw error;
        if (error.kind !== "gone") {
          process.stderr.write(`playbook: pod ${pod.name} has not started yet: ${error.message}\n`);
          continue;
        }
      }
    }
    const archived = await readArchive(options, pod, write, headOnce);
    if (archived !== true) {
      gone.push(pod);
      archiveSaid ??= archived;
    }
  }
  if (gone.length > 0) throw goneError(options, gone, archiveSaid);
  return EXIT.succeeded;
}

/** A gone pod's log from the archive: true once printed, else what the archive said (undefined: no archive). */
async function readArchive(
  options: LogsOptions,
  pod: RunPod,
  write: (text: string) => void,
  onOpen: () => void,
): Promise<true | string | undefined> {
  try {
    await readArchivedLog(options.cluster, options.name, {
      attempt: pod.attempt,
      signal: new AbortController().signal,
      onOpen: (read) => {
        onOpen();
        process.stderr.write(
          `playbook: from the log archive: attempt ${read.attempt}, ${read.bytes} bytes\n`,
        );
      },
      onLine: write,
    });
    return true;
  } catch (error) {
    if (error instanceof ArchiveUnavailable) return error.served ? error.message : undefined;
    throw error;
  }
}

async function followLogs(
  options: LogsOptions,
  playbook: ClusterPlaybook,
  write: (text: string) => void,
  header: (pod: RunPod) => void,
): Promise<number> {
  const { cluster, name } = options;
  const state = new RunState();
  // Only a run that has not ended is followed (showLogs).
  state.update(playbook, false);
  const { podAttempts } = podsInStatus(playbook);
  const gone = (
    podAttempts > 1 ? missingAttempts(name, await podsOfRun(cluster, playbook), podAttempts) : []
  ).filter((pod) => options.attempt === undefined || pod.attempt === options.attempt);
  const watching = new AbortController();
  const reading = new AbortController();
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
    reading.abort();
    watching.abort();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  const watched = watchPlaybook(
    cluster,
    name,
    (latest) => state.update(latest, latest !== null && terminalReason(latest) !== undefined),
    watching.signal,
  );
  let pods = 0;
  const skipped = (pod: RunPod) => options.attempt !== undefined && pod.attempt !== options.attempt;
  try {
    const following = followRun(
      cluster,
      state,
      {
        onPod: (pod) => {
          if (skipped(pod)) return;
          if (pods++ > 0 || podAttempts > 1) header(pod);
        },
        onLine: (line, pod) => {
          if (!skipped(pod)) write(line.text);
        },
        onGone: (pod) => {
          if (!skipped(pod)) gone.push(pod);
        },
        onProblem: (pod, message) =>
          process.stderr.write(
            `playbook: cannot read the log of pod ${pod.name} now (trying again): ${message}\n`,
          ),
      },
      reading.signal,
    ).finally(() => watching.abort());
    await Promise.all([
      following,
      // A watch that fails (RBAC, unreachable) ends the command with its error.
      watched.catch((error: unknown) => {
        reading.abort();
        throw error;
      }),
    ]);
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    watching.abort();
  }
  if (interrupted) return EXIT.interrupted;
  if (state.gone && !terminalReason(state.latest ?? playbook)) {
    throw new ClusterError(
      `${RESOURCE} ${name} in namespace ${cluster.namespace} was deleted while its log was followed (context ${cluster.context}, server ${cluster.server})`,
      EXIT.lost,
    );
  }
  // Attempts whose pods were gone before they were read: from the archive, after the rest.
  const unread: RunPod[] = [];
  let archiveSaid: string | undefined;
  for (const pod of gone.sort((a, b) => a.attempt - b.attempt)) {
    const archived = await readArchive(options, pod, write, () => header(pod));
    if (archived === true) continue;
    unread.push(pod);
    archiveSaid ??= archived;
  }
  if (unread.length > 0) throw goneError(options, unread, archiveSaid);
  return EXIT.succeeded;
}
