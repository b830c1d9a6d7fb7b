// `--policy FILE` of `playbook run` and `playbook validate`: a namespace's PlaybookPolicy read from
// a file, so a Playbook can be checked against it (and run with its defaults) before it is applied.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseAllDocuments } from "yaml";
import { type LimitDefaults, resolveLimits } from "../api/limits.js";
import { InvalidPlaybookError, zodProblems } from "../api/manifest.js";
import type { Playbook } from "../api/playbook.js";
import { checkPolicy, type NamespaceRules, PlaybookPolicySchema, policyRulesOf } from "../api/policy.js";
import { InvalidPolicyFileError } from "./policy-file-error.js";

// In a module of its own, so that program.ts can tell it without loading this one.
export { InvalidPolicyFileError } from "./policy-file-error.js";

/** The rules a policy file gives; throws InvalidPolicyFileError naming the file and each bad field. */
export function readPolicyFile(file: string): NamespaceRules {
  const where = `--policy ${file}`;
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const what = code === "ENOENT" ? "no such file" : `cannot read: ${code ?? (error as Error).message}`;
    throw new InvalidPolicyFileError(`${where}: ${what} (${resolve(file)})`);
  }
  const documents = parseAllDocuments(text, { prettyErrors: true, merge: true });
  const yamlError = documents.flatMap((doc) => doc.errors)[0];
  if (yamlError) {
    throw new InvalidPolicyFileError(`${where}: YAML: ${yamlError.message.split("\n")[0]}`);
  }
  const values = documents.map((doc) => doc.toJS() as unknown).filter((v) => v !== null && v !== undefined);
  if (values.length !== 1) {
    throw new InvalidPolicyFileError(
      `${where}: holds ${values.length} documents: expected exactly one PlaybookPolicy`,
    );
  }
  const parsed = PlaybookPolicySchema.safeParse(values[0]);
  if (!parsed.success) {
    const problems = zodProblems(parsed.error, values[0]);
    throw new InvalidPolicyFileError(
      `${where}: invalid PlaybookPolicy`,
      ...problems.map((p) => `  ${p.path}: ${p.message}`),
    );
  }
  return policyRulesOf(parsed.data);
}

// Also `playbook describe`'s (describe-playbook.ts), which reads no policy file: in policy.ts.
export { defaultsUnder } from "../api/policy.js";

/** Throws InvalidPlaybookError with what the policy refuses in the Playbook, as the controller would. */
export function enforcePolicy(
  playbook: Playbook,
  rules: NamespaceRules,
  defaults: LimitDefaults,
  source: string,
): void {
  const problems = checkPolicy(playbook.spec, resolveLimits(playbook.spec, defaults), rules);
  if (problems.length > 0) {
    throw new InvalidPlaybookError(
      source,
      problems.map(({ path, message }) => ({ path, message })),
    );
  }
}
