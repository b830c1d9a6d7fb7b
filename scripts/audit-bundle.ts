// The security audit of the code the bundle carries. dist/bin/*.js inlines its npm packages and
// the package declares no runtime dependency, so `npm audit --omit=dev` audits nothing: this asks
// the registry's bulk advisory endpoint (POST /-/npm/v1/security/advisories/bulk, what npm audit
// uses) about exactly the packages and versions in the bundle's SBOM (dist/bin/sbom.cdx.json,
// written by the build from the bundle's source maps), and fails at high severity or above.
//
//   node dist/scripts/audit-bundle.js [--sbom FILE] [--registry URL] [--level high]
//                                     [--if-unreachable fail|warn]
//
// Exit codes: 0 nothing at or above the level; 1 a bundled package has such an advisory; 2 the
// advisory database could not be asked (the line says which URL and what it answered), or bad
// input. `--if-unreachable warn` turns that 2 into 0 with the same line, for a machine whose
// registry does not serve audits (a mirror that answers 405); CI with the public registry fails.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { z } from "zod";
import { SBOM_FILE } from "./third-party-notices.js";

export const SEVERITIES = ["info", "low", "moderate", "high", "critical"] as const;
export type Severity = (typeof SEVERITIES)[number];

export const BULK_ADVISORY_PATH = "/-/npm/v1/security/advisories/bulk";

export interface BundledComponent {
  name: string;
  version: string;
}

const SbomSchema = z.object({
  components: z.array(z.looseObject({ name: z.string().min(1), version: z.string().min(1) })),
});

/** The packages and versions the SBOM lists; a file that is not one is refused naming it. */
export function componentsOfSbom(file: string): BundledComponent[] {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    throw new Error(`${file}: cannot read the SBOM (${(error as Error).message}); run \`npm run build\``);
  }
  const parsed = SbomSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`${file}: not a CycloneDX SBOM: ${issue?.path.join(".") || "(root)"}: ${issue?.message}`);
  }
  return parsed.data.components.map(({ name, version }) => ({ name, version }));
}

const AdvisorySchema = z.looseObject({
  id: z.union([z.number(), z.string()]).optional(),
  title: z.string().default("(no title)"),
  url: z.string().default(""),
  severity: z.enum(SEVERITIES),
  vulnerable_versions: z.string().default("*"),
});
export type Advisory = z.infer<typeof AdvisorySchema>;
const BulkResponseSchema = z.record(z.string(), z.array(AdvisorySchema));

export interface Finding {
  name: string;
  version: string;
  advisory: Advisory;
  /** At or above the level that fails the audit. */
  failing: boolean;
}

export type AuditOutcome =
  | { kind: "audited"; findings: Finding[]; packages: number }
  | { kind: "unreachable"; url: string; detail: string; packages: number };

/** The advisories that affect a bundled version, each marked failing or not at `level`. */
export function findingsOf(
  components: BundledComponent[],
  advisories: Record<string, Advisory[]>,
  level: Severity,
): Finding[] {
  const threshold = SEVERITIES.indexOf(level);
  const findings: Finding[] = [];
  for (const { name, version } of components) {
    for (const advisory of advisories[name] ?? []) {
      if (!versionInRange(version, advisory.vulnerable_versions)) continue;
      findings.push({ name, version, advisory, failing: SEVERITIES.indexOf(advisory.severity) >= threshold });
    }
  }
  return findings;
}

/** The exit code and the lines to print for an outcome. */
export function verdict(
  outcome: AuditOutcome,
  options: { level: Severity; ifUnreachable: "fail" | "warn" },
): { code: number; lines: string[] } {
  if (outcome.kind === "unreachable") {
    const line =
      `audit-bundle: the advisory database could not be reached: POST ${outcome.url} ${outcome.detail}; ` +
      `the ${outcome.packages} bundled packages were NOT audited`;
    return options.ifUnreachable === "warn"
      ? { code: 0, lines: [`${line} (--if-unreachable warn: not failing)`] }
      : { code: 2, lines: [line] };
  }
  const lines = outcome.findings.map(
    ({ name, version, advisory, failing }) =>
      `audit-bundle: ${failing ? "FAIL" : "note"} ${name}@${version}: ${advisory.severity}: ${advisory.title}` +
      `${advisory.url ? ` (${advisory.url})` : ""}; vulnerable: ${advisory.vulnerable_versions}`,
  );
  const failing = outcome.findings.filter((finding) => finding.failing).length;
  lines.push(
    failing > 0
      ? `audit-bundle: ${failing} advisories at ${options.level} or above in the bundled packages (${outcome.packages} audited)`
      : `audit-bundle: no advisory at ${options.level} or above in the ${outcome.packages} bundled packages`,
  );
  return { code: failing > 0 ? 1 : 0, lines };
}

/** Asks the registry about every bundled package and version at once. */
export async function auditComponents(
  components: BundledComponent[],
  registry: string,
  level: Severity,
  timeoutMs = 30_000,
): Promise<AuditOutcome> {
  const url = `${registry.replace(/\/+$/, "")}${BULK_ADVISORY_PATH}`;
  const body: Record<string, string[]> = {};
  for (const { name, version } of components) body[name] = [...(body[name] ?? []), version];
  const unreachable = (detail: string): AuditOutcome => ({
    kind: "unreachable",
    url,
    detail,
    packages: components.length,
  });
  let response: Response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    return unreachable(`failed: ${cause?.code ?? cause?.message ?? (error as Error).message}`);
  }
  const text = await response.text();
  if (!response.ok) {
    const excerpt = text.replace(/\s+/g, " ").trim().slice(0, 200);
    return unreachable(
      `answered ${response.status} ${response.statusText}`.trim() + (excerpt ? `: ${excerpt}` : ""),
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return unreachable(`answered ${response.status} with a body that is not JSON`);
  }
  const parsed = BulkResponseSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return unreachable(
      `answered ${response.status} with no advisory list: ${issue?.path.join(".") || "(root)"}: ${issue?.message}`,
    );
  }
  return {
    kind: "audited",
    findings: findingsOf(components, parsed.data, level),
    packages: components.length,
  };
}

/** npm's own setting (npm_config_registry when run by npm, else `npm config get registry`). */
function configuredRegistry(): string {
  const fromEnv = process.env.npm_config_registry;
  if (fromEnv) return fromEnv;
  try {
    return execFileSync("npm", ["config", "get", "registry"], { encoding: "utf8" }).trim();
  } catch {
    return "https://registry.npmjs.org/";
  }
}

// --- npm version ranges, as node-semver reads the ones advisories use ---

type Version = [number, number, number, string];

function parseVersion(text: string): Version | undefined {
  const match =
    /^v?(\d+)(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/.exec(
      text.trim(),
    );
  if (!match) return undefined;
  const part = (value: string | undefined) =>
    value === undefined || /[xX*]/.test(value) ? 0 : Number(value);
  return [part(match[1]), part(match[2]), part(match[3]), match[4] ?? ""];
}

function compare(a: Version, b: Version): number {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return (a[i] as number) - (b[i] as number);
  if (a[3] === b[3]) return 0;
  if (a[3] === "") return 1;
  if (b[3] === "") return -1;
  return a[3] < b[3] ? -1 : 1;
}

/**
 * Whether `version` is in an npm range made of comparators (`<4.17.21`, `>=2.0.0 <2.1.3`,
 * `1.2.3`, `*`) joined by `||`. A range it cannot read counts as matching: an advisory is
 * never dropped for want of a parser.
 */
export function versionInRange(version: string, range: string): boolean {
  const v = parseVersion(version);
  if (!v) return true;
  return range.split("||").some((alternative) => {
    const comparators = alternative
      .trim()
      .replace(/(<=|>=|<|>|=)\s+/g, "$1")
      .split(/\s+/)
      .filter((c) => c !== "");
    if (comparators.length === 0) return true;
    return comparators.every((comparator) => {
      if (comparator === "*" || comparator === "x") return true;
      const match = /^(<=|>=|<|>|=)?(.+)$/.exec(comparator);
      const bound = match ? parseVersion(match[2] ?? "") : undefined;
      if (!match || !bound) return true;
      const order = compare(v, bound);
      switch (match[1]) {
        case "<":
          return order < 0;
        case "<=":
          return order <= 0;
        case ">":
          return order > 0;
        case ">=":
          return order >= 0;
        default:
          return order === 0;
      }
    });
  });
}

const FlagsSchema = z.object({
  sbom: z.string().min(1),
  registry: z.url({ protocol: /^https?$/, error: "must be an http(s) URL" }),
  level: z.enum(SEVERITIES),
  "if-unreachable": z.enum(["fail", "warn"]),
});

function parseFlags(argv: string[]): z.infer<typeof FlagsSchema> {
  const root = path.resolve(import.meta.dirname, "../..");
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? "";
    const match = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    if (!match?.[1]) throw new Error(`unexpected argument ${JSON.stringify(arg)}`);
    const value = match[2] ?? argv[++i];
    if (value === undefined) throw new Error(`--${match[1]} needs a value`);
    flags[match[1]] = value;
  }
  const unknown = Object.keys(flags).filter((key) => !(key in FlagsSchema.shape));
  if (unknown.length > 0) throw new Error(`unknown flag --${unknown[0]}`);
  const parsed = FlagsSchema.safeParse({
    sbom: path.join(root, "dist", "bin", SBOM_FILE),
    level: "high",
    "if-unreachable": "fail",
    ...flags,
    registry: flags.registry ?? configuredRegistry(),
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = String(issue?.path[0] ?? "");
    throw new Error(`--${field} ${JSON.stringify(flags[field] ?? "")}: ${issue?.message}`);
  }
  return parsed.data;
}

async function main(): Promise<number> {
  let flags: z.infer<typeof FlagsSchema>;
  let components: BundledComponent[];
  try {
    flags = parseFlags(process.argv.slice(2));
    components = componentsOfSbom(flags.sbom);
  } catch (error) {
    process.stderr.write(`audit-bundle: ${(error as Error).message}\n`);
    return 2;
  }
  const outcome = await auditComponents(components, flags.registry, flags.level);
  const { code, lines } = verdict(outcome, { level: flags.level, ifUnreachable: flags["if-unreachable"] });
  for (const line of lines) process.stdout.write(`${line}\n`);
  return code;
}

if (process.argv[1] && path.resolve(process.argv[1]).endsWith(path.join("scripts", "audit-bundle.js"))) {
  process.exitCode = await main();
}
