// The error of a --policy file that cannot be used (policy-file.ts), apart so that program.ts can
// tell it from others without loading the policy's module.
import { escapeControls } from "../api/visible-text.js";

/**
 * Its message is one line a problem: each line given is escaped on its own (src/api/visible-text.ts),
 * so a file name or a value with a newline in it never starts a line of its own.
 */
export class InvalidPolicyFileError extends Error {
  constructor(...lines: string[]) {
    super(lines.map(escapeControls).join("\n"));
  }
}
