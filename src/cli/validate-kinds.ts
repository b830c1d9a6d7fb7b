// `playbook validate` of the project's other kinds: a PlaybookPolicy and a CronPlaybook are each
// checked with their own schema (and a CronPlaybook's template as the Playbook a run of it would
// be), so a file of either kind gets its own errors instead of "kind must be Playbook".
import { LOCAL_DEFAULTS } from "../api/limits.js";
import {
  InvalidPlaybookError,
  type ManifestProblem,
  validatePlaybook,
  zodProblems,
} from "../api/manifest.js";
import { API_VERSION, KIND } from "../api/playbook.js";
import { GOVERNING_POLICY_NAME, PlaybookPolicySchema, POLICY_KIND } from "../api/policy.js";
import { policyProblems } from "../api/policy-consistency.js";
import { describeSpec, validLine } from "./describe-spec.js";
import { InvalidPolicyFileError } from "./policy-file-error.js";

/** A CronPlaybook's kind, as src/api/cron-playbook.ts names it (not imported: see validateCron). */
export const CRON_KIND = "CronPlaybook";

/** The kinds validate knows, in the words of its refusal of any other. */
export const VALIDATED_KINDS = [KIND, POLICY_KIND, CRON_KIND] as const;

/** What validate prints for a document whose kind is not Playbook; throws naming each problem. */
export async function validateOtherKind(
  document: unknown,
  kind: string,
  file: string,
  policyFile: string | undefined,
): Promise<string[]> {
  if (kind === POLICY_KIND) {
    if (policyFile !== undefined) {
      throw new InvalidPolicyFileError(`--policy ${policyFile}: ${file} is itself a ${POLICY_KIND}`);
    }
    return validatePolicy(document, file);
  }
  if (kind === CRON_KIND) return validateCron(document, file, policyFile);
  throw invalid(file, "manifest", [
    {
      path: "kind",
      message: `${JSON.stringify(kind)} is not a kind validate knows: ${VALIDATED_KINDS.join(", ")}`,
    },
  ]);
}

function invalid(file: string, kind: string, problems: ManifestProblem[]): InvalidPolicyFileError {
  return new InvalidPolicyFileError(
    `${file}: invalid ${kind}`,
    ...problems.map((p) => `  ${p.path}: ${p.message}`),
  );
}

function validatePolicy(document: unknown, file: string): string[] {
  const parsed = PlaybookPolicySchema.safeParse(document);
  if (!parsed.success) throw invalid(file, POLICY_KIND, zodProblems(parsed.error, document));
  const policy = parsed.data;
  // As the controller's Ready condition says it, against this command's own maximums.
  const problems = policyProblems(
    { name: policy.metadata.name, spec: policy.spec },
    LOCAL_DEFAULTS.maxCeilingMs,
    LOCAL_DEFAULTS.maxKillGrace?.ms,
    LOCAL_DEFAULTS.maxFinallyCeiling?.ms,
  );
  if (problems.length > 0) {
    throw invalid(
      file,
      POLICY_KIND,
      problems.map((problem) => {
        const colon = problem.indexOf(": ");
        return { path: problem.slice(0, colon), message: problem.slice(colon + 2) };
      }),
    );
  }
  const { defaults = {}, maximums = {} } = policy.spec;
  const listed = (entries: [string, unknown][]) =>
    entries
      .filter(([, value]) => value !== undefined && typeof value !== "object")
      .map(([key, value]) => `${key} ${String(value)}`)
      .join(", ") || "none";
  const lines = [
    validLine(file, POLICY_KIND, policy.metadata.name),
    `  defaults: ${listed(Object.entries(defaults))}`,
    `  maximums: ${listed(Object.entries(maximums))}`,
  ];
  if (policy.metadata.name !== GOVERNING_POLICY_NAME) {
    lines.push(
      `  it governs nothing: only the ${POLICY_KIND} named ${GOVERNING_POLICY_NAME} governs its namespace`,
    );
  }
  return lines;
}

async function validateCron(
  document: unknown,
  file: string,
  policyFile: string | undefined,
): Promise<string[]> {
  // Its schema reads the schedule with croner, which is the controller's: loaded for this alone.
  const { CronPlaybookSchema, MAX_CRON_NAME } = await import("../api/cron-playbook.js");
  const { readSchedule } = await import("../api/cron-schedule.js");
  const parsed = CronPlaybookSchema.safeParse(document);
  if (!parsed.success) throw invalid(file, CRON_KIND, zodProblems(parsed.error, document));
  const cron = parsed.data;
  const problems: ManifestProblem[] = [];
  if (cron.metadata.name.length > MAX_CRON_NAME) {
    problems.push({
      path: "metadata.name",
      message: `${JSON.stringify(cron.metadata.name)} is longer than ${MAX_CRON_NAME} characters: its runs add a dash and up to 10 digits`,
    });
  }
  // The template as a run of it is checked: the Playbook the controller would create.
  let defaults = LOCAL_DEFAULTS;
  let rules: Awaited<ReturnType<typeof import("./policy-file.js")["readPolicyFile"]>> | undefined;
  if (policyFile !== undefined) {
    const { defaultsUnder, readPolicyFile } = await import("./policy-file.js");
    rules = readPolicyFile(policyFile);
    defaults = defaultsUnder(rules, LOCAL_DEFAULTS);
  }
  const asRun = {
    apiVersion: API_VERSION,
    kind: KIND,
    metadata: { name: cron.metadata.name },
    spec: cron.spec.template.spec,
  };
  try {
    const playbook = validatePlaybook(asRun, defaults, file);
    if (rules) {
      const { enforcePolicy } = await import("./policy-file.js");
      enforcePolicy(playbook, rules, defaults, file);
    }
  } catch (error) {
    if (!(error instanceof InvalidPlaybookError)) throw error;
    problems.push(
      ...error.problems.map((p) => ({ ...p, path: p.path.replace(/^spec(?=\.|$)/, "spec.template.spec") })),
    );
  }
  if (problems.length > 0) throw invalid(file, CRON_KIND, problems);
  const { schedule, timeZone, concurrencyPolicy, suspend } = cron.spec;
  const read = readSchedule(schedule, timeZone);
  const next = read.ok ? read.schedule.next(new Date()) : null;
  return [
    validLine(file, CRON_KIND, cron.metadata.name),
    `  schedule ${JSON.stringify(schedule)} (${timeZone}), concurrencyPolicy ${concurrencyPolicy}${suspend ? ", suspended" : ""}, next run ${next ? next.toISOString() : "never"}`,
    "  each run:",
    ...describeSpec(
      cron.spec.template.spec,
      defaults,
      rules?.defaults.image,
      rules?.maximums,
      rules?.defaults,
    ).map((line) => `  ${line}`),
  ];
}
