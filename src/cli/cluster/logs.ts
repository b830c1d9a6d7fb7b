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
  const { podName } = podsInStatus(playbook);
  // A run that has ended has nothing to follow: its logs are printed whole, from the archive too.
  if (options.follow && terminalReason(playbook) === undefined)
    return followLogs(options, playbook, new AttemptPrinter(options, out));
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
  return printLogs(options, playbook, new AttemptPrinter(options, out));
}

/**
 * How `logs` prints, the same whether it prints or follows: each line (one task's alone with
 * --task), a header before each attempt when more than one is shown (never with --attempt or
 * --task), and a gone pod's attempt from the archive, remembering what could not be read.
 */
class AttemptPrinter {
  private readonly options: LogsOptions;
  private readonly out: NodeJS.WritableStream;
  private readonly prefix: string | undefined;
  private shown = 0;
  /** The attempts whose lines have begun: a header is written once. */
  private readonly begun = new Set<number>();
  private readonly unread: RunPod[] = [];
  private archiveSaid: string | undefined;

  constructor(options: LogsOptions, out: NodeJS.WritableStream) {
    this.options = options;
    this.out = out;
    this.prefix = options.task === undefined ? undefined : `[${options.task}] `;
  }

  /** Whether --attempt leaves this attempt out. */
  skips(pod: RunPod): boolean {
    return this.options.attempt !== undefined && pod.attempt !== this.options.attempt;
  }

  line(text: string): void {
    if (this.prefix === undefined) this.out.write(`${text}\n`);
    else if (text.startsWith(this.prefix)) this.out.write(`${text.slice(this.prefix.length)}\n`);
  }

  /** An attempt's lines begin; `many`: more than this one attempt is (or will be) shown. */
  begin(pod: RunPod, many: boolean): void {
    if (this.begun.has(pod.attempt)) return;
    this.begun.add(pod.attempt);
    const headed = this.options.attempt === undefined && this.prefix === undefined;
    if (headed && (many || this.shown > 0))
      this.out.write(`--- pod ${pod.name} (attempt ${pod.attempt}) ---\n`);
    this.shown++;
  }

  /** A gone pod's attempt from the archive: true once printed; false (remembered as unread) when not. */
  async fromArchive(pod: RunPod, many: boolean, remember = true): Promise<boolean> {
    try {
      await readArchivedLog(this.options.cluster, this.options.name, {
        attempt: pod.attempt,
        signal: new AbortController().signal,
        onOpen: (read) => {
          this.begin(pod, many);
          process.stderr.write(
            `playbook: from the log archive: attempt ${read.attempt}, ${read.bytes} bytes\n`,
          );
        },
        onLine: (text) => this.line(text),
      });
      return true;
    } catch (error) {
      if (!(error instanceof ArchiveUnavailable)) throw error;
      if (remember) {
        this.unread.push(pod);
        // Not served at all: say nothing of an archive.
        if (error.served) this.archiveSaid ??= error.message;
      }
      return false;
    }
  }

  /** Ends the command: an error naming the attempts neither their pods nor the archive gave. */
  finish(): number {
    if (this.unread.length > 0) throw goneError(this.options, this.unread, this.archiveSaid);
    return EXIT.succeeded;
  }
}

/** Every attempt's log in order (or the one --attempt names): its pod's while kept, else the archive's. */
async function printLogs(
  options: LogsOptions,
  playbook: ClusterPlaybook,
  printer: AttemptPrinter,
): Promise<number> {
  const { cluster, name } = options;
  const { podAttempts } = podsInStatus(playbook);
  const pods = await podsOfRun(cluster, playbook);
  const every = [...pods, ...missingAttempts(name, pods, podAttempts)].sort((a, b) => a.attempt - b.attempt);
  const chosen = every.filter((pod) => !printer.skips(pod));
  if (chosen.length === 0)
    throw new ClusterError(
      `--attempt ${options.attempt}: ${RESOURCE} ${name} in namespace ${cluster.namespace} has ${podAttempts === 1 ? "attempt 1 only" : `attempts 1 to ${podAttempts}`}`,
      EXIT.invalid,
    );
  const signal = new AbortController().signal;
  const many = chosen.length > 1;
  for (const pod of chosen) {
    if (pods.includes(pod)) {
      printer.begin(pod, many);
      try {
        await readPodLog(cluster, pod.name, {
          follow: false,
          signal,
          onLine: (line) => printer.line(line.text),
        });
        continue;
      } catch (error) {
        if (!(error instanceof LogUnavailable)) throw error;
        if (error.kind !== "gone") {
          process.stderr.write(`playbook: pod ${pod.name} has not started yet: ${error.message}\n`);
          continue;
        }
      }
      // Gone between the listing and the read: the archive's lines follow its header.
      await printer.fromArchive(pod, many);
      continue;
    }
    await printer.fromArchive(pod, many);
  }
  return printer.finish();
}

/**
 * Follows the run until it ends. The attempts whose pods were already gone come first, from the
 * archive, in attempt order before the live ones; one the archive cannot give yet (its upload not
 * complete) is tried again at the end, as is a pod that goes while it waits to be read.
 */
async function followLogs(
  options: LogsOptions,
  playbook: ClusterPlaybook,
  printer: AttemptPrinter,
): Promise<number> {
  const { cluster, name } = options;
  const state = new RunState();
  // Only a run that has not ended is followed (showLogs).
  state.update(playbook, false);
  const { podAttempts } = podsInStatus(playbook);
  const many = podAttempts > 1;
  const later: RunPod[] = [];
  if (podAttempts > 1)
    for (const pod of missingAttempts(name, await podsOfRun(cluster, playbook), podAttempts)) {
      if (printer.skips(pod)) continue;
      if (!(await printer.fromArchive(pod, many, false))) later.push(pod);
    }
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
  try {
    const following = followRun(
      cluster,
      state,
      {
        onPod: (pod) => {
          if (!printer.skips(pod)) printer.begin(pod, many);
        },
        onLine: (line, pod) => {
          if (!printer.skips(pod)) printer.line(line.text);
        },
        onGone: (pod) => {
          if (!printer.skips(pod)) later.push(pod);
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
  for (const pod of later.sort((a, b) => a.attempt - b.attempt)) await printer.fromArchive(pod, many);
  return printer.finish();
}
