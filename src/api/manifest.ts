// Reading a Playbook manifest: YAML or JSON text in, a typed Playbook or a list of problems out,
// each naming the field path and the value, e.g. "spec.tasks[1].timeout: 2h is longer than spec.ceiling 30m".
import { parseAllDocuments } from "yaml";
import type { z } from "zod";
import { checkLimits, type LimitDefaults } from "./limits.js";
import { KIND, type Playbook, PlaybookSchema } from "./playbook.js";

export interface ManifestProblem {
  path: string;
  message: string;
}

export class InvalidPlaybookError extends Error {
  readonly source: string;
  readonly problems: ManifestProblem[];
  constructor(source: string, problems: ManifestProblem[]) {
    super(`${source}: invalid Playbook\n${problems.map((p) => `  ${p.path}: ${p.message}`).join("\n")}`);
    this.source = source;
    this.problems = problems;
  }
}

/** Renders a zod path the way kubectl does: spec.tasks[1].timeout. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else out += out === "" ? String(part) : `.${String(part)}`;
  }
  return out === "" ? "(object)" : out;
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let current: unknown = root;
  for (const part of path) {
    if (current === null || typeof current !== "object") return undefined;
    current = (current as Record<PropertyKey, unknown>)[part];
  }
  return current;
}

function showValue(value: unknown): string {
  const text = JSON.stringify(value);
  if (text === undefined) return "";
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

const EXPECTED: Record<string, string> = {
  number: "a number",
  int: "a whole number",
  string: "a string",
  boolean: "true or false",
  array: "a list",
  object: "an object",
};

const plural = (count: number | bigint, one: string) => `${count} ${one}${Number(count) === 1 ? "" : "s"}`;

/**
 * What zod's own messages ("Invalid input: expected number, received string", "Too small:
 * expected number to be >=0") say, in the words of the project's other messages: what the field
 * must be. A message a schema wrote itself is kept as it is.
 */
function plainMessage(issue: z.core.$ZodIssue): string | null {
  if (!/^(Invalid input|Too small|Too big|Invalid option)/.test(issue.message)) return null;
  switch (issue.code) {
    case "invalid_type": {
      const expected = EXPECTED[issue.expected];
      return expected ? `must be ${expected}` : null;
    }
    case "too_small": {
      const { minimum: min, inclusive } = issue;
      if (issue.origin === "string")
        return Number(min) <= 1 ? "must not be empty" : `must have at least ${plural(min, "character")}`;
      if (issue.origin === "array") return `must have at least ${plural(min, "item")}`;
      return inclusive ? `must be at least ${min}` : `must be more than ${min}`;
    }
    case "too_big": {
      const { maximum: max, inclusive } = issue;
      if (issue.origin === "string") return `must have at most ${plural(max, "character")}`;
      if (issue.origin === "array") return `must have at most ${plural(max, "item")}`;
      return inclusive ? `must be at most ${max}` : `must be less than ${max}`;
    }
    case "invalid_value":
      return `must be ${issue.values.length === 1 ? "" : "one of "}${issue.values.map((v) => JSON.stringify(v)).join(", ")}`;
    default:
      return null;
  }
}

export function zodProblems(error: z.ZodError, input: unknown): ManifestProblem[] {
  const problems: ManifestProblem[] = [];
  for (const issue of error.issues) {
    if (issue.code === "unrecognized_keys") {
      for (const key of issue.keys) {
        problems.push({ path: formatPath([...issue.path, key]), message: "unknown field" });
      }
      continue;
    }
    const value = valueAt(input, issue.path);
    const custom = issue.code === "custom";
    let message = plainMessage(issue) ?? issue.message;
    if (value === undefined && issue.code === "invalid_type") message = "is required";
    else if (!custom && value !== undefined && typeof value !== "object")
      message = `${showValue(value)} ${message}`;
    problems.push({ path: formatPath(issue.path), message });
  }
  return problems;
}

/**
 * The object with every null-valued field removed, as the API server prunes the nulls of fields
 * the CRD does not mark nullable (`timeout:` with nothing after it is null in YAML). Null items
 * of a list stay, and are refused as the API server refuses them.
 */
function withoutNullFields(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutNullFields);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, field]) => field !== null)
      .map(([key, field]) => [key, withoutNullFields(field)]),
  );
}

export interface ManifestOptions {
  /**
   * A manifest for the API server may have metadata.generateName instead of a name (it names the
   * object on create): its check stands in for the name's, and the Playbook comes back without one.
   */
  generateName?: boolean;
}

/** The 5 characters the API server appends to a generateName, for checking it as a name would be. */
const GENERATED_SUFFIX = "x0000";

/** Validates an already-parsed object (from a file or the API server) as a Playbook. */
export function validatePlaybook(
  input: unknown,
  defaults: LimitDefaults,
  source = "playbook",
  options: ManifestOptions = {},
): Playbook {
  const kind = (input as { kind?: unknown } | null)?.kind;
  if (typeof kind === "string" && kind !== KIND) {
    // Another kind's fields are not a Playbook's: one line says so, not one per field.
    throw new InvalidPlaybookError(source, [
      { path: "kind", message: `${JSON.stringify(kind)} must be ${KIND}` },
    ]);
  }
  if (input !== null && typeof input === "object" && "spec" in input) {
    input = { ...input, spec: withoutNullFields(input.spec) };
  }
  const generateName = options.generateName ? generateNameOf(input) : undefined;
  const checked =
    generateName === undefined
      ? input
      : {
          ...(input as object),
          metadata: {
            ...(input as { metadata: object }).metadata,
            name: `${generateName}${GENERATED_SUFFIX}`,
          },
        };
  const parsed = PlaybookSchema.safeParse(checked);
  if (!parsed.success) {
    const problems = zodProblems(parsed.error, checked);
    throw new InvalidPlaybookError(
      source,
      generateName === undefined
        ? problems
        : problems.map((problem) =>
            problem.path === "metadata.name"
              ? {
                  path: "metadata.generateName",
                  message: `${JSON.stringify(generateName)} is not a valid name prefix`,
                }
              : problem,
          ),
    );
  }
  const problems = checkLimits(parsed.data.spec, defaults);
  if (problems.length > 0) throw new InvalidPlaybookError(source, problems);
  if (generateName !== undefined) {
    const { name: _, ...metadata } = parsed.data.metadata;
    return { ...parsed.data, metadata: metadata as Playbook["metadata"] };
  }
  return parsed.data;
}

/** metadata.generateName when the object has it and no name. */
function generateNameOf(input: unknown): string | undefined {
  const metadata = (input as { metadata?: unknown } | null)?.metadata;
  if (metadata === null || typeof metadata !== "object") return undefined;
  const { name, generateName } = metadata as { name?: unknown; generateName?: unknown };
  return name === undefined && typeof generateName === "string" ? generateName : undefined;
}

/** Parses manifest text holding exactly one Playbook document. */
export function parsePlaybookManifest(
  text: string,
  defaults: LimitDefaults,
  source = "playbook",
  options: ManifestOptions = {},
): Playbook {
  return validatePlaybook(readManifestDocument(text, source), defaults, source, options);
}

/**
 * The one document of a manifest as its YAML says it, unchecked (validatePlaybook checks it):
 * YAML errors, an empty file or more than one document are an InvalidPlaybookError.
 */
export function readManifestDocument(text: string, source = "playbook"): unknown {
  // Merge keys (<<) are read as kubectl's YAML reader reads them.
  const documents = parseAllDocuments(text, { prettyErrors: true, merge: true });
  const problems: ManifestProblem[] = [];
  for (const doc of documents) {
    for (const error of doc.errors) {
      const where = error.linePos?.[0]
        ? `line ${error.linePos[0].line}, column ${error.linePos[0].col}`
        : "(file)";
      problems.push({ path: where, message: `YAML: ${error.message.split("\n")[0]}` });
    }
  }
  if (problems.length > 0) throw new InvalidPlaybookError(source, problems);
  const values: unknown[] = [];
  for (const doc of documents) {
    let value: unknown;
    try {
      value = doc.toJS();
    } catch (error) {
      // e.g. too many aliases (a "billion laughs" file)
      throw new InvalidPlaybookError(source, [
        { path: "(file)", message: `YAML: ${(error as Error).message}` },
      ]);
    }
    // Empty documents (a trailing ---, a leading ---) are skipped, as kubectl skips them.
    if (value !== null && value !== undefined) values.push(value);
  }
  if (values.length === 0) {
    throw new InvalidPlaybookError(source, [{ path: "(file)", message: "is empty: expected one Playbook" }]);
  }
  if (values.length > 1) {
    throw new InvalidPlaybookError(source, [
      { path: "(file)", message: `holds ${values.length} documents: expected exactly one Playbook` },
    ]);
  }
  return values[0];
}
