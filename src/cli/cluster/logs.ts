// `playbook logs NAME [-f] [--task T]`: a run's output, read from its pods' runner logs (every
// attempt's, in order) for as long as the controller keeps the pods. --task keeps one task's lines,
// without their `[task] ` prefix; -f follows until the run ends.
import { EXIT } from "../exit-codes.js";
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

function goneError(options: LogsOptions, gone: RunPod[]): ClusterError {
  const { cluster, name } = options;
  const pods = gone.map((pod) => pod.name).join(", ");
  return new ClusterError(
    `${gone.length === 1 ? `pod ${pods} is` : `pods ${pods} are`} gone, so the log of ${RESOURCE} ${name} in namespace ${cluster.namespace} cannot be read ` +
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
  const { podName, podAttempts } = podsInStatus(playbook);
  if (!options.follow) {
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
    const pods = await podsOfRun(cluster, playbook);
    const gone = missingAttempts(name, pods, podAttempts);
    const several = pods.length + gone.length > 1;
    const signal = new AbortController().signal;
    for (const pod of pods) {
      if (several) header(pod);
      try {
        await readPodLog(cluster, pod.name, { follow: false, signal, onLine: (line) => write(line.text) });
      } catch (error) {
        if (!(error instanceof LogUnavailable)) throw error;
        if (error.kind === "gone") gone.push(pod);
        else process.stderr.write(`playbook: pod ${pod.name} has not started yet: ${error.message}\n`);
      }
    }
    if (gone.length > 0)
      throw goneError(
        options,
        gone.sort((a, b) => a.attempt - b.attempt),
      );
    return EXIT.succeeded;
  }
  return followLogs(options, playbook, write, header);
}

async function followLogs(
  options: LogsOptions,
  playbook: ClusterPlaybook,
  write: (text: string) => void,
  header: (pod: RunPod) => void,
): Promise<number> {
  const { cluster, name } = options;
  const state = new RunState();
  state.update(playbook, terminalReason(playbook) !== undefined);
  const { podAttempts } = podsInStatus(playbook);
  const gone = podAttempts > 1 ? missingAttempts(name, await podsOfRun(cluster, playbook), podAttempts) : [];
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
  const watched = state.ended
    ? Promise.resolve()
    : watchPlaybook(
        cluster,
        name,
        (latest) => state.update(latest, latest !== null && terminalReason(latest) !== undefined),
        watching.signal,
      );
  let pods = 0;
  try {
    const following = followRun(
      cluster,
      state,
      {
        onPod: (pod) => {
          if (pods++ > 0 || podAttempts > 1) header(pod);
        },
        onLine: (line) => write(line.text),
        onGone: (pod) => gone.push(pod),
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
  if (gone.length > 0)
    throw goneError(
      options,
      gone.sort((a, b) => a.attempt - b.attempt),
    );
  return EXIT.succeeded;
}
