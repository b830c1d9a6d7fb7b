// The shell a task's `run` goes to (spec.shell, spec.tasks[].shell, as GitHub Actions' `shell`):
// a command line of words separated by spaces, with no quoting or expansion, run as
// `WORDS... -c RUN`. Neither set: `sh -c RUN`, the contract's default, kept for compatibility.
// The CRD checks the same (crds/playbook.dev_playbooks.yaml, SHELL_PATTERN).
import { z } from "zod";

/** At most this many words: a program and a few options (`/usr/bin/env bash -eo pipefail`). */
export const MAX_SHELL_WORDS = 8;
export const MAX_SHELL_LENGTH = 256;
/** The shell that runs a task whose Playbook names none. */
export const DEFAULT_SHELL: readonly string[] = ["sh"];

/** C0 controls and DEL: never part of a word (a tab or newline would look like a separator). */
const hasControl = (text: string) => [...text].some((c) => c.charCodeAt(0) < 0x20 || c === "\u007f");
/**
 * An absolute path, or a plain command name looked up on PATH (no `./x`, no `bin/x`, no `-e`).
 * Checked after the control characters are refused, as the CRD's pattern refuses them in words.
 */
const FIRST_WORD = /^(\/[^ ]*|[A-Za-z0-9_][-A-Za-z0-9._+]*)$/;
/**
 * The CRD's pattern: what the checks below let through, in one RE2 expression. \x20 is the space
 * that separates words; it and the control characters never stand inside one.
 */
export const SHELL_PATTERN =
  "^ *(/[^\\x00-\\x20\\x7f]*|[A-Za-z0-9_][-A-Za-z0-9._+]*)( +[^\\x00-\\x20\\x7f]+){0,7} *$";

/** The words of a shell field as the task runs them. */
export function shellWords(value: string): string[] {
  return value.split(" ").filter((word) => word !== "");
}

/** A shell field's value, checked word by word so that a refusal says which rule it broke. */
export const ShellCommand = z
  .string({ error: 'must be the shell\'s words as one string, such as "bash -eo pipefail"' })
  .superRefine((value, ctx) => {
    const shown = JSON.stringify(value);
    const refuse = (why: string) => ctx.addIssue({ code: "custom", message: `${shown} ${why}` });
    if ([...value].length > MAX_SHELL_LENGTH) return refuse(`must be at most ${MAX_SHELL_LENGTH} characters`);
    if (hasControl(value)) {
      return refuse("must not contain control characters (tabs, newlines): words are separated by spaces");
    }
    const words = shellWords(value);
    const [first] = words;
    if (first === undefined) return refuse('must name a shell, such as "bash -eo pipefail" or "sh -eu"');
    if (words.length > MAX_SHELL_WORDS) {
      return refuse(
        `has ${words.length} words, at most ${MAX_SHELL_WORDS}: a shell and its options, run as WORDS -c RUN`,
      );
    }
    if (!FIRST_WORD.test(first)) {
      return refuse(
        `must start with an absolute path (/bin/bash) or a command name found on PATH (bash), not ${JSON.stringify(first)}`,
      );
    }
  });

/** A task's effective shell, and the field it came from (for messages). */
export interface TaskShell {
  words: string[];
  /** `spec.tasks[1].shell` or `spec.shell` */
  field: string;
  /** the field's value as written */
  value: string;
}

/** The task's own shell wins over spec.shell; neither: undefined (`sh -c`, the default). */
export function effectiveShell(
  task: { shell?: string | undefined },
  index: number,
  specShell: string | undefined,
  list: "tasks" | "finally" = "tasks",
): TaskShell | undefined {
  if (task.shell !== undefined) {
    return { words: shellWords(task.shell), field: `spec.${list}[${index}].shell`, value: task.shell };
  }
  if (specShell !== undefined) return { words: shellWords(specShell), field: "spec.shell", value: specShell };
  return undefined;
}

/** How the task's run is executed, in words: `bash -eo pipefail -c` or `sh -c`. */
export function describeShell(shell: TaskShell | undefined): string {
  return `${(shell?.words ?? DEFAULT_SHELL).join(" ")} -c`;
}
