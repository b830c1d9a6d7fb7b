// The machine's load while a figure was measured: these machines are shared, so each figure
// carries what else ran beside it. Linux only (/proc); elsewhere the readings are null.
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { z } from "zod";

const Reading = z.number().finite().nullable();

export const LoadDuringSchema = z.strictObject({
  seconds: z.number().nonnegative(),
  /** the 1-minute load average, lowest and highest of the samples (one a second, and the ends) */
  loadAverage1: z.strictObject({ min: z.number(), max: z.number() }),
  /** percent of all cores' time busy over the span (/proc/stat), null where not readable */
  busyPercent: Reading,
  /** percent of all cores' time stolen by the hypervisor over the span; null where not shown */
  stealPercent: Reading,
});
export type LoadDuring = z.infer<typeof LoadDuringSchema>;

interface CpuTimes {
  total: number;
  idle: number;
  steal: number | null;
}

/** The aggregate `cpu` line of /proc/stat: user nice system idle iowait irq softirq steal ... */
export function parseCpuLine(stat: string): CpuTimes | null {
  const line = stat.split("\n").find((l) => l.startsWith("cpu "));
  if (!line) return null;
  const fields = line.trim().split(/\s+/).slice(1).map(Number);
  if (fields.length < 4 || fields.some((n) => !Number.isFinite(n))) return null;
  // guest and guest_nice (fields 9, 10) are counted in user and nice already.
  const counted = fields.slice(0, 8);
  return {
    total: counted.reduce((sum, n) => sum + n, 0),
    idle: (fields[3] ?? 0) + (fields[4] ?? 0),
    steal: fields.length >= 8 ? (fields[7] as number) : null,
  };
}

function readCpu(): CpuTimes | null {
  try {
    return parseCpuLine(readFileSync("/proc/stat", "latin1"));
  } catch {
    return null;
  }
}

/** Samples the load from `start()` until `stop()`; the timer holds no process open. */
export class MachineLoad {
  private readonly startedAt = performance.now();
  private readonly cpuAtStart = readCpu();
  private readonly samples: number[] = [loadavg()[0] as number];
  private readonly timer: NodeJS.Timeout;

  constructor(everyMs = 1000) {
    this.timer = setInterval(() => this.samples.push(loadavg()[0] as number), everyMs);
    this.timer.unref();
  }

  /** The load so far; the sampler goes on until stop(). */
  reading(): LoadDuring {
    const cpu = readCpu();
    const start = this.cpuAtStart;
    const samples = [...this.samples, loadavg()[0] as number];
    const span = cpu && start ? cpu.total - start.total : 0;
    const round = (n: number) => Math.round(n * 10) / 10;
    return {
      seconds: round((performance.now() - this.startedAt) / 1000),
      loadAverage1: { min: Math.min(...samples), max: Math.max(...samples) },
      busyPercent: cpu && start && span > 0 ? round((100 * (span - (cpu.idle - start.idle))) / span) : null,
      stealPercent:
        cpu && start && span > 0 && cpu.steal !== null && start.steal !== null
          ? round((100 * (cpu.steal - start.steal)) / span)
          : null,
    };
  }

  stop(): LoadDuring {
    clearInterval(this.timer);
    return this.reading();
  }
}
