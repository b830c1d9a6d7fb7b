// `playbook run` refuses, before anything runs, a task on this machine whose shell
// (spec.tasks[].shell, spec.shell) is not here: an absolute path that is no executable file, or a
// command name found nowhere on the PATH the task runs with (its own env's, else this process's).
// `playbook validate` warns of it (the manifest may be meant for a cluster, where such a task runs
// in the runner image). A task in an image is checked where it runs, by its container's agent.
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import type { PlaybookSpec } from "../api/playbook.js";
import { effectiveShell, type TaskShell } from "../api/shell.js";
import { allTasksOf } from "../api/task-images.js";

function isExecutableFile(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Where the shell's program is on this machine, or what was looked at in words. */
export function findHostShell(
  program: string,
  path: string | undefined,
): { found: string } | { looked: string } {
  if (program.includes("/")) {
    return isExecutableFile(program)
      ? { found: program }
      : { looked: `${program} is not an executable file` };
  }
  const dirs = (path ?? "").split(delimiter);
  for (const dir of dirs) {
    // An empty entry is the working directory, as execvp reads it.
    const candidate = join(dir === "" ? "." : dir, program);
    if (isExecutableFile(candidate)) return { found: candidate };
  }
  return {
    looked: `${program} was not found on PATH ${path === undefined ? "(unset)" : JSON.stringify(path)}`,
  };
}

/**
 * The first problem with the shells of the tasks that run on this machine (`onHost(index)`), as a
 * refusal's message; undefined when every one is here. Each field is named once.
 */
export function hostShellProblem(
  spec: Pick<PlaybookSpec, "shell" | "tasks" | "finally">,
  /** by index over the main tasks, then the finally tasks */
  onHost: (index: number) => boolean,
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  const checked = new Set<string>();
  for (const [index, { task, path: place }] of allTasksOf(spec).entries()) {
    const shell: TaskShell | undefined = effectiveShell(task, place[1], spec.shell, place[0]);
    if (shell === undefined || !onHost(index)) continue;
    const path = task.env.find((variable) => variable.name === "PATH")?.value ?? env.PATH;
    const key = `${shell.field}\0${path}`;
    if (checked.has(key)) continue;
    checked.add(key);
    const program = shell.words[0] ?? "";
    const look = findHostShell(program, path);
    if ("looked" in look) {
      const of = shell.field === "spec.shell" ? ` (the shell of task ${task.name})` : "";
      return `${shell.field} ${JSON.stringify(shell.value)}${of}: ${look.looked} on this machine`;
    }
  }
  return undefined;
}
