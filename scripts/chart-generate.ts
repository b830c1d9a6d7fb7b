// `npm run chart:generate`: writes what the Helm chart derives from other sources, so nothing can
// drift: the CRD copies (crds/ is the one source), Chart.yaml's version and appVersion (package.json),
// values.schema.json and README.md's values table (both from values.yaml and its comments), and the
// README's runbook (RUNBOOK.md beside it). `-- --check` writes nothing and fails on any difference.
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { parse } from "yaml";
import { z } from "zod";
import { repoRoot } from "../test/harness/binaries.js";

export const CHART_DIR = path.join("charts", "playbook-controller");

/** JSON-schema fragments a `@schema` comment may name with `{"$ref": "#/$defs/NAME"}`. */
const DEFS: Record<string, Record<string, unknown>> = {
  duration: {
    type: "string",
    pattern: "^(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$",
    description: "a Go duration such as 90s, 10m or 1h30m",
  },
};

type Schema = Record<string, unknown>;

interface KeyDoc {
  description: string;
  schema: Schema;
}

const SchemaComment = z.record(z.string(), z.unknown());

/**
 * The comment block above each key of values.yaml, by dotted path: prose becomes the description,
 * `@schema {...}` lines add JSON-schema keywords. Indentation gives the path.
 */
export function readKeyDocs(valuesText: string): Map<string, KeyDoc> {
  const docs = new Map<string, KeyDoc>();
  const stack: { indent: number; key: string }[] = [];
  let comments: string[] = [];
  let commentIndent = -1;
  valuesText.split("\n").forEach((line, index) => {
    const comment = /^(\s*)#\s?(.*)$/.exec(line);
    if (comment) {
      const indent = comment[1]?.length ?? 0;
      if (indent !== commentIndent) comments = [];
      commentIndent = indent;
      comments.push(comment[2] ?? "");
      return;
    }
    const entry = /^(\s*)([A-Za-z0-9_]+):/.exec(line);
    if (!entry) {
      comments = [];
      commentIndent = -1;
      return;
    }
    const indent = entry[1]?.length ?? 0;
    while (stack.length > 0 && (stack.at(-1)?.indent ?? 0) >= indent) stack.pop();
    stack.push({ indent, key: entry[2] ?? "" });
    const own = indent === commentIndent ? comments : [];
    const schema: Schema = {};
    const prose: string[] = [];
    for (const text of own) {
      if (text.startsWith("@schema ")) {
        try {
          Object.assign(schema, SchemaComment.parse(JSON.parse(text.slice("@schema ".length))));
        } catch (error) {
          throw new Error(`values.yaml line ${index + 1}: bad @schema comment: ${(error as Error).message}`);
        }
      } else {
        prose.push(text);
      }
    }
    docs.set(stack.map((s) => s.key).join("."), { description: prose.join(" ").trim(), schema });
    comments = [];
    commentIndent = -1;
  });
  return docs;
}

function inlineRefs(schema: Schema): Schema {
  const ref = schema.$ref;
  if (typeof ref !== "string") return schema;
  const name = /^#\/\$defs\/(.+)$/.exec(ref)?.[1];
  const def = name ? DEFS[name] : undefined;
  if (!def) throw new Error(`unknown schema reference ${ref}`);
  const { $ref: _, ...rest } = schema;
  return { ...def, ...rest };
}

function typeOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (Number.isInteger(value)) return "integer";
  return typeof value;
}

/** values.schema.json: every key typed from its default and comment; unknown keys refused. */
export function valuesSchema(values: Record<string, unknown>, docs: Map<string, KeyDoc>): Schema {
  const walk = (value: unknown, at: string): Schema => {
    const doc = docs.get(at);
    const own = inlineRefs(doc?.schema ?? {});
    const base: Schema = { type: typeOf(value) };
    if (doc?.description) base.description = doc.description;
    const freeForm = "additionalProperties" in own || "items" in own;
    if (typeOf(value) === "object" && !freeForm) {
      const properties: Record<string, Schema> = {};
      for (const [key, child] of Object.entries(value as Record<string, unknown>)) {
        properties[key] = walk(child, at ? `${at}.${key}` : key);
      }
      return { ...base, ...own, properties, additionalProperties: false };
    }
    return { ...base, ...own };
  };
  const root = walk(values, "");
  const properties = {
    ...(root.properties as Record<string, Schema>),
    // Helm passes parent charts' globals to every chart.
    global: { type: "object", description: "Globals of a parent chart", additionalProperties: true },
  };
  return {
    $schema: "http://json-schema.org/draft-07/schema#",
    title: "playbook-controller chart values",
    ...root,
    properties,
  };
}

function formatDefault(value: unknown): string {
  const text = JSON.stringify(value);
  return `\`${text.replaceAll("|", "\\|")}\``;
}

/** The README's table: one row per documented key, in the file's order. */
export function valuesTable(values: Record<string, unknown>, docs: Map<string, KeyDoc>): string {
  const rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"];
  const get = (at: string): unknown =>
    at.split(".").reduce<unknown>((node, key) => (node as Record<string, unknown>)?.[key], values);
  for (const [at, doc] of docs) {
    const value = get(at);
    const schema = inlineRefs(doc.schema);
    // A map of documented keys is described by its rows; only free-form maps get one of their own.
    if (typeOf(value) === "object" && !("additionalProperties" in schema)) continue;
    // A key inside a free-form default (resources.limits.memory) is part of its ancestor's default.
    const parts = at.split(".");
    const inFreeForm = parts.slice(0, -1).some((_, i) => {
      const ancestor = docs.get(parts.slice(0, i + 1).join("."))?.schema ?? {};
      return "additionalProperties" in ancestor || "items" in ancestor;
    });
    if (inFreeForm) continue;
    if (!doc.description) throw new Error(`values.yaml: ${at} has no description comment`);
    const type = Array.isArray(schema.type)
      ? schema.type.join(" \\| ")
      : String(schema.type ?? typeOf(value));
    const allowed = Array.isArray(schema.enum) ? ` One of ${schema.enum.join(", ")}.` : "";
    rows.push(`| \`${at}\` | ${type} | ${formatDefault(value)} | ${doc.description}${allowed} |`);
  }
  return rows.join("\n");
}

function replaceBetween(text: string, marker: string, content: string, file: string): string {
  const start = `<!-- ${marker}:start -->`;
  const end = `<!-- ${marker}:end -->`;
  const from = text.indexOf(start);
  const to = text.indexOf(end);
  if (from < 0 || to < from) throw new Error(`${file} lacks the ${start} … ${end} markers`);
  return `${text.slice(0, from + start.length)}\n${content}\n${text.slice(to)}`;
}

/** Every file the generator owns, with the content it should have. */
export function generatedFiles(root: string = repoRoot()): Map<string, string> {
  const chart = path.join(root, CHART_DIR);
  const files = new Map<string, string>();
  for (const name of readdirSync(path.join(root, "crds")).filter((f) => /\.ya?ml$/.test(f))) {
    files.set(path.join(chart, "files", "crds", name), readFileSync(path.join(root, "crds", name), "utf8"));
  }
  // The admission policy of the plain install (deploy/), which the chart renders with its own service account.
  files.set(
    path.join(chart, "files", "admission-policy.yaml"),
    readFileSync(path.join(root, "deploy", "admission-policy.yaml"), "utf8"),
  );
  const version = z
    .object({ version: z.string() })
    .parse(JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"))).version;
  const chartYaml = readFileSync(path.join(chart, "Chart.yaml"), "utf8")
    .replace(/^version: .*$/m, `version: ${version}`)
    .replace(/^appVersion: .*$/m, `appVersion: "${version}"`);
  files.set(path.join(chart, "Chart.yaml"), chartYaml);

  const valuesText = readFileSync(path.join(chart, "values.yaml"), "utf8");
  const values = z.record(z.string(), z.unknown()).parse(parse(valuesText));
  const docs = readKeyDocs(valuesText);
  files.set(
    path.join(chart, "values.schema.json"),
    `${JSON.stringify(valuesSchema(values, docs), null, 2)}\n`,
  );

  const readmeFile = path.join(chart, "README.md");
  let readme = readFileSync(readmeFile, "utf8");
  readme = replaceBetween(readme, "values", valuesTable(values, docs), readmeFile);
  const runbookFile = path.join(chart, "RUNBOOK.md");
  if (existsSync(runbookFile)) {
    // One level down: the runbook's sections sit under the README's "Alerts" heading.
    const runbook = readFileSync(runbookFile, "utf8")
      .replace(/^# .*\n+/, "")
      .replace(/^(#+) /gm, "#$1 ")
      .trim();
    readme = replaceBetween(readme, "runbook", runbook, readmeFile);
  }
  files.set(readmeFile, readme);
  return files;
}

/** Files whose content differs from what the generator would write. */
export function staleFiles(root: string = repoRoot()): string[] {
  const stale: string[] = [];
  for (const [file, content] of generatedFiles(root)) {
    if (!existsSync(file) || readFileSync(file, "utf8") !== content) stale.push(path.relative(root, file));
  }
  return stale;
}

const isMain =
  process.argv[1] && path.resolve(process.argv[1]).endsWith(path.join("scripts", "chart-generate.js"));
if (isMain) {
  const check = process.argv.includes("--check");
  if (check) {
    const stale = staleFiles();
    if (stale.length > 0) {
      process.stderr.write(`chart:generate: out of date (run npm run chart:generate): ${stale.join(", ")}\n`);
      process.exit(1);
    }
    process.stderr.write("chart:generate: the chart's generated files are up to date\n");
  } else {
    const files = generatedFiles();
    for (const [file, content] of files) writeFileSync(file, content);
    process.stderr.write(`chart:generate: wrote ${files.size} files\n`);
  }
}
