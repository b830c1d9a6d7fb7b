// The `playbook` command: run | validate | pod-runner | controller (main.ts loads it and runs it).
import { closeSync, existsSync, openSync, readFileSync, rmSync } from "node:fs";
import { basename, resolve } from "node:path";
import { Command, CommanderError, Option } from "commander";
import { z } from "zod";
import { type LimitDefaults, LOCAL_DEFAULTS, resolveLimits } from "../api/limits.js";
import { readManifestDocument, validatePlaybook } from "../api/manifest.js";
import { placementFieldsSet } from "../api/placement.js";
import { PLAN_ENV_VAR } from "../api/plan.js";
import type { Playbook, TaskSpec } from "../api/playbook.js";
import type { PolicyDefaults, PolicyMaximums } from "../api/policy.js";
import { REASON_MEANINGS } from "../api/reasons.js";
import { statusFromReport } from "../api/report-status.js";
import { allTasksOf } from "../api/task-images.js";
import { INTERRUPTS_HELP } from "../pod-runner/interrupts.js";
import { registerClusterCommands } from "./cluster/commands.js";
import { describeSpec, validLine } from "./describe-spec.js";
import { EXIT, EXIT_CODES_HELP } from "./exit-codes.js";
import { describeFailure, UsageError } from "./failure-message.js";
import { hostShellProblem } from "./host-shells.js";
import {
  describeReadError,
  keepStdin,
  readDocument,
  readStdinOrRefuse,
  STDIN_MANIFEST_VAR,
} from "./manifest-input.js";
import { printObject } from "./print-object.js";

/** The manifest, checked against the --policy file when one is given, and the defaults it runs with. */
async function readChecked(
  document: unknown,
  file: string,
  policyFile: string | undefined,
): Promise<{
  playbook: Playbook;
  defaults: LimitDefaults;
  defaultImage?: string | undefined;
  maximums?: PolicyMaximums | undefined;
  policyDefaults?: PolicyDefaults | undefined;
}> {
  if (policyFile === undefined)
    return { playbook: checkManifest(document, file, LOCAL_DEFAULTS), defaults: LOCAL_DEFAULTS };
  // The policy's module, and the hundred zod schemas it builds, only when a policy is given.
  const { defaultsUnder, enforcePolicy, readPolicyFile } = await import("./policy-file.js");
  const rules = readPolicyFile(policyFile);
  const defaults = defaultsUnder(rules, LOCAL_DEFAULTS);
  const playbook = checkManifest(document, file, defaults);
  enforcePolicy(playbook, rules, defaults, file);
  return {
    playbook,
    defaults,
    defaultImage: rules.defaults.image,
    maximums: rules.maximums,
    policyDefaults: rules.defaults,
  };
}

/** The Playbook checked; one with only metadata.generateName is taken, as `submit` takes it. */
function checkManifest(document: unknown, file: string, defaults: LimitDefaults): Playbook {
  return validatePlaybook(document, defaults, file, { generateName: true });
}

/** What kind of object the document says it is, when it says so. */
function kindOf(document: unknown): string | undefined {
  const kind = (document as { kind?: unknown } | null)?.kind;
  return typeof kind === "string" ? kind : undefined;
}

/** A run of a Playbook with only generateName is named as the API server would name it. */
function runName(playbook: Playbook): string {
  const { name, generateName } = playbook.metadata as { name?: string; generateName?: string };
  if (name) return name;
  const alphabet = "bcdfghjklmnpqrstvwxz2456789";
  const suffix = Array.from({ length: 5 }, () => alphabet[Math.floor(Math.random() * alphabet.length)]);
  return `${generateName ?? "playbook-"}${suffix.join("")}`;
}

/**
 * --report FILE is checked before anything runs: a report that cannot be written would otherwise
 * be found out only after the run. Opened for appending (nothing it holds is lost) and, when this
 * check created it, removed again.
 */
function checkReportPath(file: string): void {
  const existed = existsSync(file);
  try {
    closeSync(openSync(file, "a"));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const words: Record<string, string> = {
      ENOENT: "its folder does not exist",
      EACCES: "permission denied",
      EPERM: "permission denied",
      EISDIR: "is a directory",
      ENOTDIR: "a folder on the path is a file",
      EROFS: "the file system is read-only",
    };
    const what = (code && words[code]) ?? `cannot write: ${code ?? (error as Error).message}`;
    throw new UsageError(`--report ${file}: ${what} (${resolve(file)}); nothing was run`);
  }
  if (!existed) rmSync(file, { force: true });
}

const RunFlags = z.strictObject({
  filename: z.string({ error: "-f FILE is required" }).min(1),
  output: z
    .enum(["json", "yaml"], { error: (issue) => `-o ${String(issue.input)}: must be json or yaml` })
    .optional(),
  report: z.string().min(1).optional(),
  policy: z.string().min(1).optional(),
  onHost: z.boolean().optional(),
  secret: z.array(z.string()).default([]),
  configMap: z.array(z.string()).default([]),
});

const collect = (value: string, previous: string[]) => [...previous, value];

async function runCommand(flags: unknown): Promise<number> {
  const parsed = RunFlags.parse(flags);
  if (parsed.report !== undefined) checkReportPath(parsed.report);
  // Where the run cannot have a cgroup of its own, it starts again under a child subreaper, before
  // anything is read from stdin. As root, the manifest is read first: a run whose tasks all run
  // on this machine starts again in a PID namespace of its own (an image task's container is the
  // engine's, which the runner must see from the host's /proc), and one read from stdin is kept
  // in a file for it.
  const { cgroupAvailable } = await import("../pod-runner/containment.js");
  const { relaunchUnderSubreaper } = await import("../pod-runner/subreaper.js");
  const root = process.geteuid?.() === 0;
  const stdinText =
    root && parsed.filename === "-" && process.env[STDIN_MANIFEST_VAR] === undefined
      ? readStdinOrRefuse()
      : undefined;
  const early = root
    ? await readChecked(
        stdinText === undefined ? readDocument(parsed.filename) : readManifestDocument(stdinText, "-"),
        parsed.filename,
        parsed.policy,
      )
    : undefined;
  const { effectiveImage } = await import("../pod-runner/local-images.js");
  const onHostOnly =
    early !== undefined &&
    (parsed.onHost === true ||
      allTasksOf(early.playbook.spec).every(
        ({ task }) => effectiveImage(task, early.playbook.spec, early.defaultImage) === undefined,
      ));
  // Where stdin cannot be kept (no writable temp folder), the run goes on here as it is.
  let forget: (() => void) | undefined;
  try {
    forget = stdinText === undefined ? undefined : keepStdin(stdinText);
    relaunchUnderSubreaper(cgroupAvailable, onHostOnly);
  } catch {
    // not kept: not started again
  }
  // Not started again: the manifest was read here.
  forget?.();
  const checked = early ?? (await readChecked(readDocument(parsed.filename), parsed.filename, parsed.policy));
  const { defaults, defaultImage } = checked;
  const playbook = {
    ...checked.playbook,
    metadata: { ...checked.playbook.metadata, name: runName(checked.playbook) },
  };
  const limits = resolveLimits(playbook.spec, defaults);
  // Tasks that name an image (or whose policy's default does): their engine, or --on-host, is
  // settled before anything runs.
  const { prepareLocalImages } = await import("../pod-runner/local-images.js");
  const images = await prepareLocalImages(playbook.spec, parsed.onHost === true, defaultImage);
  if (images && "error" in images) throw new UsageError(images.error);
  // A task on this machine whose shell is not here: refused before anything runs. A task in a
  // container is its agent's to check.
  const shellProblem = hostShellProblem(
    playbook.spec,
    (index) => images?.mode !== "containers" || images.containerOf[index] === undefined,
  );
  if (shellProblem !== undefined) throw new UsageError(`${shellProblem}; nothing was run`);
  // Placement needs a scheduler and a pod: said once, before anything runs.
  const placement = placementFieldsSet(playbook.spec);
  if (placement.length > 0) {
    process.stderr.write(
      `playbook: ${placement.map((field) => `spec.${field}`).join(", ")} ignored: they place a cluster's pod, and this run is on this machine\n`,
    );
  }
  // The runner (and node:crypto, node:child_process) only for the commands that run tasks.
  const { runLocal } = await import("../pod-runner/local-entry.js");
  const { Progress } = await import("./progress.js");
  // --secret and --config-map: env values resolved from the folders into the tasks run, never
  // into the Playbook printed with -o; the Secrets' values masked in the output.
  const sources = (await import("./local-sources.js")).localSources(
    playbook,
    parsed.secret,
    parsed.configMap,
  );
  const result = await runLocal({
    name: playbook.metadata.name,
    spec: {
      ...playbook.spec,
      tasks: sources.tasks,
      ...(sources.finally.length ? { finally: sources.finally } : {}),
    },
    ...(sources.maskValues.length ? { maskValues: sources.maskValues } : {}),
    limits,
    images,
    output: parsed.output ? process.stderr : process.stdout,
    progressOut: process.stderr,
    tty: Boolean(process.stderr.isTTY),
    draw: (view) => new Progress(view),
    reportPath: parsed.report,
  });
  if (parsed.output) {
    const status = statusFromReport(result.report, limits, new Date(), [], playbook.metadata.generation);
    // The image each task ran in: in its container (not --on-host, which the message says).
    if (images?.mode === "containers") {
      // The finally tasks count on after the main ones in the images' list.
      for (const [index, task] of [...(status.tasks ?? []), ...(status.finally ?? [])].entries()) {
        const image = images.images[index];
        if (image !== undefined && task.attempts > 0) task.image = image;
      }
    }
    const object = { ...playbook, status };
    printObject(object, parsed.output);
  }
  return result.exitCode;
}

async function validateCommand(flags: { filename?: string; policy?: string }): Promise<number> {
  if (!flags.filename) throw new UsageError("-f FILE is required");
  const document = readDocument(flags.filename);
  const kind = kindOf(document);
  if (kind !== undefined && kind !== "Playbook") {
    // The other kinds' schemas (and a CronPlaybook's schedule library) only when one is given.
    const { validateOtherKind } = await import("./validate-kinds.js");
    const lines = await validateOtherKind(document, kind, flags.filename, flags.policy);
    process.stdout.write(`${lines.join("\n")}\n`);
    return EXIT.succeeded;
  }
  const { playbook, defaults, defaultImage, maximums, policyDefaults } = await readChecked(
    document,
    flags.filename,
    flags.policy,
  );
  // What runs on this machine (no image, as `playbook run` would run it) should find its shell here;
  // on a cluster the same task runs in the runner image, which may have it: a warning, not a refusal.
  const { effectiveImage } = await import("../pod-runner/local-images.js");
  const all = allTasksOf(playbook.spec);
  const shellProblem = hostShellProblem(
    playbook.spec,
    (index) => effectiveImage(all[index]?.task as TaskSpec, playbook.spec, defaultImage) === undefined,
  );
  if (shellProblem !== undefined) {
    process.stderr.write(
      `playbook: warning: ${shellProblem}: \`playbook run\` would refuse it here (on a cluster the task runs in the runner image)\n`,
    );
  }
  const { name, generateName } = playbook.metadata as { name?: string; generateName?: string };
  const named = name ?? `${generateName}<generated>`;
  const lines = [
    validLine(flags.filename, "Playbook", named),
    ...describeSpec(playbook.spec, defaults, defaultImage, maximums, policyDefaults),
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
  return EXIT.succeeded;
}

const PodRunnerFlags = z.strictObject({
  plan: z.string().min(1).optional(),
  terminationLog: z.string().min(1),
});

async function podRunnerCommand(flags: unknown): Promise<number> {
  const parsed = PodRunnerFlags.parse(flags);
  let planText: string | undefined;
  try {
    planText = parsed.plan ? readFileSync(parsed.plan, "utf8") : process.env[PLAN_ENV_VAR];
  } catch (error) {
    throw new UsageError(`--plan ${parsed.plan}: ${describeReadError(error, parsed.plan ?? "")}`);
  }
  if (!planText) throw new UsageError(`no plan: set ${PLAN_ENV_VAR} or pass --plan FILE`);
  const { runInPod, PlanError } = await import("../pod-runner/pod-entry.js");
  const { Progress } = await import("./progress.js");
  try {
    const result = await runInPod({
      planText,
      planSource: parsed.plan ?? PLAN_ENV_VAR,
      env: process.env,
      terminationLog: parsed.terminationLog,
      output: process.stdout,
      draw: (view) => new Progress(view),
    });
    return result.exitCode;
  } catch (error) {
    if (error instanceof PlanError) throw new UsageError(error.message);
    throw error;
  }
}

function reasonsHelp(): string {
  return `\nReasons (condition Succeeded):\n${Object.entries(REASON_MEANINGS)
    .map(([reason, meaning]) => `  ${reason.padEnd(20)} ${meaning}`)
    .join("\n")}\n`;
}

/** How `playbook run` runs each task, beside where a pod runs it. */
const RUN_TASKS_HELP = `How each task runs:
  shell           shell: bash -eo pipefail (a task's own, or spec.shell) runs it as
                  bash -eo pipefail -c RUN: any failing command or pipe fails the task.
                  Without one: sh -c RUN, which goes on after them (the default, kept).
  working dir     on this machine: the directory playbook run was started in (a relative
                  workingDir is taken from there); in a task's image and in a pod: /workspace.
`;

const adviseHelp = (invokedAs: string) => `
advise reads; it never changes an object. The method (docs/advise.md, --explain): per task
and for the whole run, the successful attempts' durations (longest silences for the stall),
newer runs weighing more, read at 1 - the false-kill rate, times the margin, at least the
floor, rounded up to a readable duration. Attempts that ended at a limit only push up.
Then a backtest on the same runs (which would the proposal have killed, and what time it saves
on runs that hung) and drift warnings (a trend up, a task near its limit, a limit far too loose).

Exit codes: 0 the advice was printed (a Playbook with too few runs gets none, and is told so);
2 invalid input (a flag's value, a file in --reports that is no run, -f, no such CronPlaybook);
3 the cluster could not be reached.

  ${invokedAs} advise --reports runs/ -f playbook.yaml -o patch > limits.yaml
  kubectl patch --local -f playbook.yaml --type=merge --patch-file limits.yaml -o yaml
  ${invokedAs} advise cron nightly -n ops -o patch > limits.yaml
  kubectl patch cronplaybook nightly -n ops --type=merge --patch-file limits.yaml
  ${invokedAs} advise cron nightly -n ops --prometheus http://prometheus:9090 --window 2160h

--prometheus reads the controller's histograms (older history than the objects kept): each
figure is given with the bucket it lies in, and a proposal starts from the bucket's upper bound.
Per-task figures need the controller's --metrics-task-label; the series of a Playbook, its
--metrics-playbook-label (docs/advise.md).
`;

export const CONTROLLER_DESCRIPTION =
  "reconcile Playbooks into pods on the cluster in KUBECONFIG, or in-cluster";

/**
 * The controller's flags come from its configuration's schema, which takes a start some
 * milliseconds to build: its module is loaded only when argv names the command (help included).
 * Otherwise the command's line in `playbook --help` is all that is needed, and this gives it, the
 * same as the real command's ("controller [options]  ...").
 */
function registerControllerPlaceholder(program: Command, description: string): void {
  program.command("controller").description(description).addOption(new Option("--placeholder").hideHelp());
}

/**
 * The manifest, as `-f FILE` (kubectl's way) or as `FILE`: users try both. Both at once, or
 * neither, is refused in commander's words and with its pointer to --help.
 */
function manifestFile(command: Command, file: string | undefined, flags: { filename?: string }): string {
  if (flags.filename && file) {
    command.error(`error: unexpected argument '${file}': the manifest is -f ${flags.filename}`);
  }
  const named = flags.filename ?? file;
  if (!named) command.error("error: no manifest: give it as -f FILE or FILE");
  return named as string;
}

export function buildProgram(
  version: string,
  setExit: (code: number) => Promise<void> | void,
  controllerCommand?: typeof import("./controller-command.js"),
  invokedAs = "playbook",
): Command {
  const program = new Command(invokedAs)
    .description("Run Playbooks — ordered shell tasks under deadlines that really end the work")
    .version(version, "-V, --version")
    .exitOverride()
    // As git and kubectl do: the error, then where to find help, not the whole help.
    .showHelpAfterError(`See '${invokedAs} --help' for usage.`);
  program
    .command("run")
    .showHelpAfterError(`See '${invokedAs} run --help' for usage.`)
    .description("run a Playbook manifest on this machine with the pod runner")
    .usage("[options] -f FILE | FILE")
    .argument("[file]", "the Playbook manifest, as -f gives it")
    .option("-f, --filename <file>", "the Playbook manifest (YAML or JSON; - for stdin)")
    .addOption(
      new Option("-o, --output <format>", "print the Playbook with its final status").choices([
        "json",
        "yaml",
      ]),
    )
    .option(
      "--report <file>",
      "also write the runner's report there, as the pod writes its termination message (checked before the run)",
    )
    .option(
      "--policy <file>",
      "a PlaybookPolicy manifest: refuse what it refuses and take its defaults, as in its namespace",
    )
    .option("--secret <NAME=DIR>", "a Secret the tasks name, one file per key (repeat)", collect, [])
    .option("--config-map <NAME=DIR>", "a ConfigMap the tasks name, one file per key (repeat)", collect, [])
    .option(
      "--on-host",
      "run the tasks that name an image on this machine instead of in their image (podman or docker)",
    )
    .addHelpText("after", `\n${RUN_TASKS_HELP}\n${INTERRUPTS_HELP}\n${EXIT_CODES_HELP}\n${reasonsHelp()}`)
    .action(async (file: string | undefined, flags: { filename?: string }, command: Command) => {
      setExit(await runCommand({ ...flags, filename: manifestFile(command, file, flags) }));
    });
  program
    .command("validate")
    .showHelpAfterError(`See '${invokedAs} validate --help' for usage.`)
    .description(
      "check a manifest (a Playbook, PlaybookPolicy or CronPlaybook) and show each effective limit with its source",
    )
    .usage("[options] -f FILE | FILE")
    .argument("[file]", "the manifest, as -f gives it")
    .option(
      "-f, --filename <file>",
      "the manifest: a Playbook, PlaybookPolicy or CronPlaybook (YAML or JSON; - for stdin)",
    )
    .option(
      "--policy <file>",
      "a PlaybookPolicy manifest: check the Playbook against it and show its defaults (source policy)",
    )
    .action(async (file: string | undefined, flags: { filename?: string }, command: Command) => {
      setExit(await validateCommand({ ...flags, filename: manifestFile(command, file, flags) }));
    });
  program
    .command("pod-runner")
    .showHelpAfterError(`See '${invokedAs} pod-runner --help' for usage.`)
    .description("run the plan the controller put in the pod (used as the container's command)")
    .option("--plan <file>", `read the plan from a file instead of $${PLAN_ENV_VAR}`)
    .option(
      "--termination-log <file>",
      "where the report goes",
      process.env.PLAYBOOK_TERMINATION_MESSAGE_PATH ?? "/dev/termination-log",
    )
    .action(async (flags) => setExit(await podRunnerCommand(flags)));
  program
    .command("advise")
    .showHelpAfterError(`See '${invokedAs} advise --help' for usage.`)
    .description(
      "propose each task's timeout and stall and the run's ceiling from past runs, with the evidence",
    )
    .usage(
      "--reports DIR | cron NAME | -l SELECTOR [--prometheus URL] | --prometheus URL --playbook VALUE [options]",
    )
    .argument("[source]", "cron: the runs of a CronPlaybook on the cluster")
    .argument("[name]", "the CronPlaybook")
    .option("--reports <dir>", "a folder of past runs: `playbook run -o json|yaml` output and --report files")
    .option("-l, --selector <selector>", "the Playbooks on the cluster with these labels (e.g. app=backup)")
    .option(
      "-f, --filename <file>",
      "with --reports: the Playbook manifest they ran (names a report's tasks; what -o patch patches)",
    )
    .option(
      "-o, --output <format>",
      "table (default), json, or patch: a merge patch of the Playbook's spec (never applied)",
    )
    .option("--explain", "print the method with each figure it used")
    .option(
      "--rate <share>",
      "the false-kill rate: the share of successful attempts a limit may kill (default 0.001, or 1/1000)",
    )
    .option("--margin <factor>", "times the quantile (default 1.3)")
    .option(
      "--half-life <duration>",
      "a run this much older weighs half as much (default 336h, two weeks; 0: all the same)",
    )
    .option("--min-sample <n>", "fewer successful attempts than this: no proposal (default 10)")
    .option("--floor <duration>", "no limit is proposed under this (default 1m)")
    .option("--borrow", "a task with too few attempts takes the run's figure (the ceiling, the run's stall)")
    .option("--backtest <n>", "replay the newest N successful runs (default 0: all)")
    .option(
      "--prometheus <url>",
      "read the controller's duration histograms from this Prometheus instead of the objects (with cron NAME, -l or --playbook)",
    )
    .option(
      "--playbook <value>",
      "with --prometheus: the series whose playbook label is this (the controller's --metrics-playbook-label value)",
    )
    .option(
      "--playbook-label <key>",
      "with --prometheus, cron and -l: the Playbook label the controller's --metrics-playbook-label names (default app.kubernetes.io/name)",
    )
    .option("--window <duration>", "with --prometheus: how far back to read (default 720h, 30 days)")
    .option("--kubeconfig <file>", "cron, -l: the kubeconfig file (else KUBECONFIG, else ~/.kube/config)")
    .option("--context <name>", "cron, -l: the kubeconfig context to use (else its current-context)")
    .option("-n, --namespace <namespace>", "cron, -l: the namespace (else the context's, else default)")
    .addHelpText("after", adviseHelp(invokedAs))
    .action(async (source: string | undefined, name: string | undefined, flags: Record<string, unknown>) => {
      const { adviseCommand, AdviseInputError } = await import("./advise/command.js");
      try {
        if (source !== undefined && source !== "cron") {
          throw new AdviseInputError(
            `advise ${source}: unknown source; give cron NAME, -l SELECTOR or --reports DIR`,
          );
        }
        if (source === "cron" && name === undefined)
          throw new AdviseInputError("advise cron: NAME is required");
        if (flags.prometheus !== undefined) {
          if (flags.reports !== undefined)
            throw new AdviseInputError("--reports and --prometheus are two sources of runs: give one");
          const { advisePrometheusCommand } = await import("./cluster/advise-prometheus.js");
          setExit(await advisePrometheusCommand({ ...flags, ...(name !== undefined ? { cron: name } : {}) }));
          return;
        }
        for (const flag of ["playbook", "playbookLabel", "window"] as const) {
          if (flags[flag] !== undefined) {
            const option = flag === "playbookLabel" ? "--playbook-label" : `--${flag}`;
            throw new AdviseInputError(`${option} goes with --prometheus URL`);
          }
        }
        if (flags.reports !== undefined) {
          if (source !== undefined || flags.selector !== undefined) {
            throw new AdviseInputError("give one source of runs: cron NAME, -l SELECTOR or --reports DIR");
          }
          setExit(adviseCommand(flags));
          return;
        }
        if (source === undefined && flags.selector === undefined) {
          throw new AdviseInputError("give a source of runs: --reports DIR, cron NAME or -l SELECTOR");
        }
        if (flags.filename !== undefined)
          throw new AdviseInputError("-f goes with --reports; cron and -l read the cluster's spec");
        const { adviseClusterCommand } = await import("./cluster/advise.js");
        setExit(await adviseClusterCommand({ ...flags, ...(name !== undefined ? { cron: name } : {}) }));
      } catch (error) {
        if (error instanceof AdviseInputError) throw new UsageError(error.message);
        throw error;
      }
    });
  registerClusterCommands(program, invokedAs, setExit);
  if (controllerCommand) controllerCommand.registerControllerCommand(program);
  else registerControllerPlaceholder(program, CONTROLLER_DESCRIPTION);
  return program;
}

/**
 * "kubectl playbook" when started as the kubectl plugin (kubectl-playbook on the PATH, npm's bin
 * link or the checkout's script, which says so in PLAYBOOK_INVOKED_AS), as Krew's conventions ask
 * of a plugin's usage and help; otherwise "playbook".
 */
function invokedName(script: string | undefined): string {
  const called = process.env.PLAYBOOK_INVOKED_AS || basename(script ?? "");
  return /^kubectl-playbook(\.js)?$/.test(called) ? "kubectl playbook" : "playbook";
}

/** Runs the command in argv and gives its exit code; main.ts passes the version it already has. */
export async function runProgram(argv: string[], version: string): Promise<number> {
  let exitCode: number = EXIT.succeeded;
  const controllerCommand = argv.slice(2).includes("controller")
    ? await import("./controller-command.js")
    : undefined;
  const program = buildProgram(
    version,
    (code) => {
      exitCode = code;
    },
    controllerCommand,
    invokedName(argv[1]),
  );
  try {
    await program.parseAsync(argv);
    return exitCode;
  } catch (error) {
    if (error instanceof CommanderError) {
      // --help and --version end here too, with exit code 0.
      return error.exitCode === 0 ? EXIT.succeeded : EXIT.invalid;
    }
    const failure = describeFailure(error);
    process.stderr.write(`${failure.message}\n`);
    return failure.code;
  }
}
