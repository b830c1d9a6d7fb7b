// spec.shell and spec.tasks[].shell on this machine: the task's run goes to `WORDS -c RUN`, the
// words' program is the attempt's leader (same pid, its group's id) under each containment, and
// without a shell the run is `sh -c` as it always was.
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { type Containment, openContainment } from "../../src/pod-runner/containment.js";
import type { RunEvent } from "../../src/pod-runner/run.js";
import { checkNothingLeftBehind, runSpec } from "../support/runner.js";

const marker = checkNothingLeftBehind();

/** The case: the dump fails, the pipe's last command succeeds, and the upload goes on. */
const DUMP = "false | gzip > /dev/null; echo uploaded";

describe.each<[string, ((runId: string) => Containment) | undefined]>([
  ["the run's own containment (a cgroup where it can have one)", undefined],
  ["no containment (the plain wrapper)", (runId) => openContainment(runId, { PLAYBOOK_CONTAINMENT: "none" })],
])("a task's shell, under %s", (_name, containment) => {
  const run = (spec: object) => runSpec(spec, { marker: marker(), ...(containment ? { containment } : {}) });

  it("fails a task whose pipe failed under bash -eo pipefail, where sh -c, the default, goes on", async () => {
    const safe = await run({ shell: "bash -eo pipefail", tasks: [{ name: "dump", run: DUMP }] });
    expect(safe.outcome.reason).toBe("TaskFailed");
    expect(safe.outcome.tasks[0]).toMatchObject({ phase: "Failed", exitCode: 1 });
    expect(safe.output).not.toContain("uploaded");

    const plain = await run({ tasks: [{ name: "dump", run: DUMP }] });
    expect(plain.outcome.reason).toBe("Succeeded");
    expect(plain.output).toContain("uploaded");
  });

  it("takes the task's shell over spec.shell", async () => {
    const overridden = await run({
      shell: "bash -eo pipefail",
      tasks: [
        { name: "strict", run: "echo strict; false | true; echo not-reached-1" },
        { name: "lenient", shell: "sh", run: DUMP },
      ],
    });
    expect(overridden.outcome.reason).toBe("TaskFailed");
    expect(overridden.outcome.tasks.map((task) => task.phase)).toEqual(["Failed", "Skipped"]);

    const lenient = await run({
      shell: "bash -eo pipefail",
      tasks: [{ name: "lenient", shell: "sh", run: DUMP }],
    });
    expect(lenient.outcome.reason).toBe("Succeeded");
    expect(lenient.output).toContain("uploaded");

    const strict = await run({ tasks: [{ name: "strict", shell: "/bin/bash -e -o pipefail", run: DUMP }] });
    expect(strict.outcome.reason).toBe("TaskFailed");
  });

  it("runs the words' program itself as the attempt's leader: its pid is its group's", async () => {
    const result = await run({
      tasks: [
        {
          name: "leader",
          shell: "bash -eu",
          // Field 5 of /proc/PID/stat is the process group; bash's comm holds no space.
          run: 'set -- $(cat /proc/$$/stat); echo "shell=$BASH_VERSINFO leader=$([ "$5" = "$$" ] && echo yes)"',
        },
      ],
    });
    expect(result.outcome.reason).toBe("Succeeded");
    expect(result.output).toMatch(/shell=[0-9]+ leader=yes/);
  });

  /** The task run by the runner and by a bare `sh -c`: what each printed (stdout, stderr) and how it ended. */
  const beside = async (script: string) => {
    const ours = await run({ tasks: [{ name: "t", run: script }] });
    const bare = spawnSync("sh", ["-c", script], { encoding: "utf8" });
    return {
      ours: {
        output: ours.output.replace(/^\[t\] /gm, ""),
        exitCode: ours.outcome.tasks[0]?.exitCode,
        signal: ours.outcome.tasks[0]?.signal,
      },
      bare: { output: bare.stdout + bare.stderr, exitCode: bare.status, signal: bare.signal },
    };
  };

  it("gives a task of the default sh what a bare sh -c gives it: $0, no arguments, $? 0, its exit code", async () => {
    const { ours, bare } = await beside('echo "0=$0 n=$# q=$? all=[$*] opts=$-"; exit 7');
    expect(ours.output).toBe("0=sh n=0 q=0 all=[] opts=\n");
    expect(ours).toEqual(bare);
  });

  it("gives a syntax error of the default sh the line number and exit code a bare sh -c gives, on the first line too", async () => {
    for (const script of ["echo before >&2\nfi", "fi", "echo ok >&2; fi"]) {
      const { ours, bare } = await beside(script);
      expect(ours.exitCode).toBe(2);
      expect(ours).toEqual(bare);
    }
  });

  it("reports a task of the default sh that its own signal ended as a bare sh -c's", async () => {
    const { ours, bare } = await beside("echo going; kill -TERM $$; echo not-reached");
    expect(ours).toMatchObject({ output: "going\n", signal: "SIGTERM" });
    expect(ours).toEqual(bare);
  });

  it("starts the default sh as the leader, at the OOM preference, in the run's cgroup where it has one", async () => {
    let kind: string | undefined;
    const onEvent = (event: RunEvent) => {
      if (event.type === "containment") kind = event.kind;
    };
    const result = await runSpec(
      {
        tasks: [
          {
            name: "t",
            run: 'set -- $(cat /proc/$$/stat); echo "leader=$([ "$5" = "$$" ] && echo yes) oom=$(cat /proc/$$/oom_score_adj) in-run-cgroup=$(grep -c /playbook- /proc/$$/cgroup)"',
          },
        ],
      },
      { marker: marker(), onEvent, ...(containment ? { containment } : {}) },
    );
    expect(result.outcome.reason).toBe("Succeeded");
    expect(result.output).toContain(`leader=yes oom=1000 in-run-cgroup=${kind === "cgroup" ? 1 : 0}`);
  });
});
