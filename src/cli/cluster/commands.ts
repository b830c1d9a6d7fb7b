// The cluster commands' definitions: submit, wait, cancel, logs, describe and cron trigger, each with kubectl's
// --kubeconfig, --context and -n. Their work (client-node, the API client) is loaded only when
// one of them runs: actions.js, which the run/validate script leaves out (scripts/bundle-cli.ts).
import { type Command, Option } from "commander";
import { EXIT_CODES_HELP, WAIT_EXIT_CODES_HELP } from "../exit-codes.js";

type SetExit = (code: number) => Promise<void> | void;

function withConnectionFlags(command: Command): Command {
  return command
    .option("--kubeconfig <file>", "the kubeconfig file (else KUBECONFIG, else ~/.kube/config)")
    .option("--context <name>", "the kubeconfig context to use (else its current-context)")
    .option("-n, --namespace <namespace>", "the namespace (else the context's, else default)");
}

const outputOption = (what: string) =>
  new Option("-o, --output <format>", `print ${what} on stdout`).choices(["json", "yaml"]);

/** `name` is how the user called the command: "playbook", or "kubectl playbook" for the plugin. */
export function registerClusterCommands(program: Command, name: string, setExit: SetExit): void {
  const help = (command: string) => `See '${name} ${command} --help' for usage.`;
  const actions = () => import("./actions.js");
  withConnectionFlags(
    program
      .command("submit")
      .showHelpAfterError(help("submit"))
      .description("create a Playbook on the cluster and print its name (--watch: follow it to its end)")
      .usage("-f FILE [options]")
      .option("-f, --filename <file>", "the Playbook manifest (YAML or JSON; - for stdin) (required)")
      .option("-w, --watch", "follow the run: progress, each task's output, and its outcome's exit code")
      .option("--cancel-on-interrupt", "with --watch: Ctrl-C cancels the run (else it only stops watching)"),
  )
    .addOption(outputOption("the Playbook (with --watch: with its final status)"))
    .addHelpText("after", `\n${EXIT_CODES_HELP}\n`)
    .action(async (flags: unknown) => setExit(await (await actions()).submitCommand(flags)));
  withConnectionFlags(
    program
      .command("wait")
      .showHelpAfterError(help("wait"))
      .description("wait for a Playbook's run to end and exit with its outcome's code")
      .argument("<NAME>", "the Playbook")
      .option("--timeout <duration>", "give up after this long (e.g. 10m): exit 4, the run goes on"),
  )
    .addOption(outputOption("the Playbook with its final status"))
    .addHelpText("after", `\n${WAIT_EXIT_CODES_HELP}\n`)
    .action(async (playbook: string, flags: object) =>
      setExit(await (await actions()).waitCommand({ ...flags, name: playbook }, name)),
    );
  withConnectionFlags(
    program
      .command("cancel")
      .showHelpAfterError(help("cancel"))
      .description("cancel a Playbook's run (spec.cancel: true); --wait: until it has ended")
      .argument("<NAME>", "the Playbook")
      .option("--wait", "wait for the run to end and exit with its outcome's code (130 once cancelled)")
      .option("--timeout <duration>", "with --wait: give up after this long (exit 4)"),
  )
    .addOption(outputOption("the Playbook with its final status (with --wait)"))
    .addHelpText("after", `\n${WAIT_EXIT_CODES_HELP}\n`)
    .action(async (playbook: string, flags: object) =>
      setExit(await (await actions()).cancelCommand({ ...flags, name: playbook }, name)),
    );
  withConnectionFlags(
    program
      .command("logs")
      .showHelpAfterError(help("logs"))
      .description(
        "print a run's output by task, while it runs and after: from its pods while they are kept, then from the log archive (where the cluster keeps one)",
      )
      .argument("<NAME>", "the Playbook")
      .option("-f, --follow", "keep printing until the run ends")
      .option("--task <name>", "only this task's output")
      .option("--attempt <K>", "only this attempt's output (its pod's, or its archived log)"),
  ).action(async (playbook: string, flags: object) =>
    setExit(await (await actions()).logsCommand({ ...flags, name: playbook })),
  );
  withConnectionFlags(
    program
      .command("describe")
      .showHelpAfterError(help("describe"))
      .description(
        "show a Playbook's outcome, each limit with its level, the pod's whole bound, the longest run and its tasks",
      )
      .argument("<NAME>", "the Playbook"),
  )
    .addHelpText(
      "after",
      [
        "",
        "The limits are the run's status.limits once it has started (what it is held to); before,",
        "they are resolved from the spec and the namespace's PlaybookPolicy default as the controller",
        "would resolve them now, with its built-in defaults.",
        "",
        "Exit codes:",
        "  0    described",
        "  2    invalid input, no such Playbook, or refused by RBAC",
        "  3    the cluster could not be reached",
        "",
      ].join("\n"),
    )
    .action(async (playbook: string, flags: object) =>
      setExit(await (await actions()).describeCommand({ ...flags, name: playbook })),
    );
  const cron = program
    .command("cron")
    .showHelpAfterError(help("cron"))
    .description("scheduled runs (CronPlaybook): trigger");
  withConnectionFlags(
    cron
      .command("trigger")
      .showHelpAfterError(help("cron trigger"))
      .description(
        "start a CronPlaybook's run now, outside its schedule and under its concurrencyPolicy, and print the run",
      )
      .argument("<NAME>", "the CronPlaybook")
      .option(
        "--timeout <duration>",
        "how long to wait for the controller's answer (default 30s; 0s: no limit)",
      ),
  )
    .addHelpText(
      "after",
      [
        "",
        "Exit codes:",
        "  0    the run was created (its name is printed: follow it with `wait` or `logs -f`)",
        "  1    not started: the concurrencyPolicy (a run still active, or another started instead; it is named), the namespace's policy, or the API server refused the run",
        "  2    invalid input, no such CronPlaybook, or refused by RBAC",
        "  3    the cluster could not be reached",
        "  4    no answer from the controller within --timeout (the request stays: it may still be answered)",
        "  130  interrupted (Ctrl-C): the request stays, the controller may still start the run",
        "",
      ].join("\n"),
    )
    .action(async (cronPlaybook: string, flags: object) =>
      setExit(await (await actions()).cronTriggerCommand({ ...flags, name: cronPlaybook })),
    );
}
