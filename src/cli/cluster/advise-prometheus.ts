import { z } from "zod";
import { LOCAL_DEFAULTS, type ResolvedLimits, resolveLimits } from "../../api/limits.js";
import { InvalidPlaybookError, validatePlaybook } from "../../api/manifest.js";
import { API_VERSION, KIND, type Playbook } from "../../api/playbook.js";
import { adviseFromHistograms, type PlaybookHistograms } from "../advise/histogram-advice.js";
import { labelValues, PrometheusError, slicedHistogram, stepTimes } from "../advise/prometheus.js";
import { renderPatch } from "../advise/render.js";
import {
  histogramAdviceJson,
  patchableOf,
  renderHistogramExplain,
  renderHistogramTable,
} from "../advise/render-histogram.js";
import {
  AdviseInputError,
  type AdviseRequest,
  DEFAULT_PLAYBOOK_LABEL,
  DEFAULT_WINDOW_MS,
  type PrometheusAdviseFlags,
  prometheusAdviseFlags,
  readAdviseManifest,
} from "../advise/request.js";
import { cronTemplate, listPlaybooks } from "./advise.js";
import { ClusterError, connect } from "./connection.js";

/** Specs on the cluster are checked as Playbooks, not against this machine's maximums. */
const SPEC_DEFAULTS = { ...LOCAL_DEFAULTS, maxCeilingMs: Number.MAX_SAFE_INTEGER };

/** One Playbook to advise on: its series' `playbook` value, and its spec when one was read. */
interface Chosen {
  name: string;
  value: string;
  playbook: Playbook | null;
}

const ListedPlaybook = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    creationTimestamp: z.string().optional(),
    labels: z.record(z.string(), z.string()).optional(),
  }),
  spec: z.unknown(),
});

/** The Playbooks to advise on, and the namespace their series are in. */
async function choose(
  f: PrometheusAdviseFlags,
  key: string,
): Promise<{ chosen: Chosen[]; namespace: string }> {
  if (f.playbook !== undefined) {
    const playbook = f.filename ? readAdviseManifest(f.filename, SPEC_DEFAULTS) : null;
    return {
      chosen: [{ name: f.playbook, value: f.playbook, playbook }],
      namespace: f.namespace ?? "default",
    };
  }
  const cluster = connect(f);
  if (f.cron !== undefined) {
    const { playbook, labels } = await cronTemplate(cluster, f.cron);
    const value = labels[key];
    if (value === undefined) {
      throw new AdviseInputError(
        `cronplaybook ${f.cron}: its template has no label ${key}, whose value names its runs' series (the controller's --metrics-playbook-label; another key: --playbook-label)`,
      );
    }
    return { chosen: [{ name: f.cron, value, playbook }], namespace: cluster.namespace };
  }
  const selector = f.selector as string;
  const items = await listPlaybooks(cluster, selector);
  const newest = new Map<string, z.infer<typeof ListedPlaybook>>();
  for (const item of items) {
    const read = ListedPlaybook.safeParse(item);
    if (!read.success) continue;
    const value = read.data.metadata.labels?.[key];
    if (value === undefined) continue;
    const seen = newest.get(value);
    if (!seen || (seen.metadata.creationTimestamp ?? "") < (read.data.metadata.creationTimestamp ?? ""))
      newest.set(value, read.data);
  }
  if (newest.size === 0) {
    throw new AdviseInputError(
      `-l ${selector}: ${items.length === 0 ? "no Playbook" : `none of the ${items.length} Playbooks has the label ${key}`} in namespace ${cluster.namespace} (context ${cluster.context}): the metrics name a Playbook by that label's value (--playbook-label)`,
    );
  }
  const chosen = [...newest]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([value, item]) => {
      try {
        const playbook = validatePlaybook(
          { apiVersion: API_VERSION, kind: KIND, metadata: { name: item.metadata.name }, spec: item.spec },
          SPEC_DEFAULTS,
          `playbook ${item.metadata.name}`,
        );
        return { name: value, value, playbook };
      } catch (error) {
        if (error instanceof InvalidPlaybookError) throw new AdviseInputError(error.message);
        throw error;
      }
    });
  return { chosen, namespace: cluster.namespace };
}

/** The histograms of one Playbook's series; a clear error when Prometheus holds none of its runs. */
async function histogramsOf(
  url: string,
  namespace: string,
  value: string,
  windowMs: number,
  endS: number,
): Promise<PlaybookHistograms> {
  const times = stepTimes(endS, windowMs / 1000);
  const matchers = { namespace, playbook: value };
  const [runs, tasks, usage] = await Promise.all([
    slicedHistogram(url, "playbook_run_duration_seconds", matchers, ["reason"], times),
    slicedHistogram(url, "playbook_task_duration_seconds", matchers, ["task", "phase"], times),
    slicedHistogram(url, "playbook_task_limit_usage_ratio", matchers, ["limit", "task"], times),
  ]);
  const any = runs.some((h) => h.slices.some((buckets) => (buckets.at(-1)?.count ?? 0) > 0));
  if (!any) {
    const windowS = windowMs / 1000;
    const values = await labelValues(
      url,
      "playbook_run_duration_seconds_count",
      { namespace },
      "playbook",
      windowS,
      endS,
    );
    const named = values.filter((v) => v !== "");
    const why =
      values.length === 0
        ? `no run of any Playbook in namespace ${namespace} there: is the controller scraped, and watching that namespace?`
        : named.length === 0
          ? `its series in namespace ${namespace} carry no playbook label: the controller runs without --metrics-playbook-label`
          : `the playbook values in namespace ${namespace} are ${named.map((v) => JSON.stringify(v)).join(", ")}`;
    throw new AdviseInputError(
      `--prometheus ${url}: no finished run of playbook=${JSON.stringify(value)} in namespace ${namespace} in the last ${windowLabel(windowMs)} (playbook_run_duration_seconds): ${why}`,
    );
  }
  return { runs, tasks, usage, times };
}

function windowLabel(ms: number): string {
  return ms % 3_600_000 === 0 ? `${ms / 3_600_000}h` : `${Math.round(ms / 60_000)}m`;
}

function limitsOf(playbook: Playbook | null): ResolvedLimits | null {
  return playbook ? resolveLimits(playbook.spec, SPEC_DEFAULTS) : null;
}

function print(
  parts: { chosen: Chosen; source: string; advice: ReturnType<typeof adviseFromHistograms> }[],
  request: AdviseRequest,
  f: PrometheusAdviseFlags,
  namespace: string,
): number {
  if (request.output === "json") {
    const all = parts.map((p) => histogramAdviceJson(p.chosen.name, p.source, p.advice));
    process.stdout.write(`${JSON.stringify(all.length === 1 ? all[0] : all, null, 2)}\n`);
    return 0;
  }
  const texts = parts.map(({ chosen, source, advice }) => {
    if (request.output === "patch") {
      const target =
        f.cron !== undefined
          ? { kind: "CronPlaybook" as const, name: f.cron, namespace }
          : { kind: "Playbook" as const };
      return renderPatch(chosen.name, chosen.playbook as Playbook, patchableOf(advice), target);
    }
    return request.explain
      ? renderHistogramExplain(chosen.name, source, advice)
      : renderHistogramTable(chosen.name, source, advice);
  });
  process.stdout.write(texts.join(request.output === "patch" ? "---\n" : "\n"));
  return 0;
}

export async function advisePrometheusCommand(rawFlags: unknown): Promise<number> {
  const { flags: f, request } = prometheusAdviseFlags(rawFlags);
  const key = f.playbookLabel ?? DEFAULT_PLAYBOOK_LABEL;
  const windowMs = f.window ?? DEFAULT_WINDOW_MS;
  try {
    const { chosen, namespace } = await choose(f, key);
    // Not rounded down: a scrape of the last second holds the runs that just ended.
    const endS = Date.now() / 1000;
    const parts = [];
    for (const one of chosen) {
      const histograms = await histogramsOf(f.prometheus, namespace, one.value, windowMs, endS);
      const advice = adviseFromHistograms(histograms, limitsOf(one.playbook), request.options);
      const source = `${f.prometheus} (namespace ${namespace}, playbook=${JSON.stringify(one.value)})`;
      parts.push({ chosen: one, source, advice });
    }
    return print(parts, request, f, namespace);
  } catch (error) {
    // The message names the URL and what failed; the exit code is its own (3: not reached).
    if (error instanceof PrometheusError) throw new ClusterError(error.message, error.exitCode);
    throw error;
  }
}
