// The controller's limit defaults and maximums: its flags' built-in values (config.ts takes them
// from here) and the LimitDefaults its settings give, so that `playbook describe` resolves a run
// not yet started as the controller would, without the controller's modules.
import { parseDuration } from "./duration.js";
import { DEFAULT_MAX_PREEMPTIONS, type LimitDefaults } from "./limits.js";

/** The built-in values of the controller's limit flags (--default-ceiling, --max-ceiling, ...). */
export const CONTROLLER_LIMIT_FLAGS = {
  defaultCeiling: "1h",
  maxCeiling: "24h",
  defaultStall: "10m",
  defaultKillGrace: "10s",
  maxKillGrace: "5m",
  defaultStartTimeout: "5m",
  defaultFinallyCeiling: "5m",
  maxFinallyCeiling: "1h",
} as const;

/** The controller's limit settings, in milliseconds (ControllerConfig's). */
export type ControllerLimitSettings = { [key in keyof typeof CONTROLLER_LIMIT_FLAGS]: number } & {
  defaultQueueTimeout?: number | undefined;
  defaultMaxPreemptions: number;
};

export function limitDefaults(config: ControllerLimitSettings): LimitDefaults {
  return {
    ceilingMs: config.defaultCeiling,
    maxCeilingMs: config.maxCeiling,
    stallMs: config.defaultStall,
    killGraceMs: config.defaultKillGrace,
    maxKillGrace: { ms: config.maxKillGrace, where: "the controller's --max-kill-grace" },
    startTimeoutMs: config.defaultStartTimeout,
    finallyCeilingMs: config.defaultFinallyCeiling,
    maxFinallyCeiling: { ms: config.maxFinallyCeiling, where: "the controller's --max-finally-ceiling" },
    ...(config.defaultQueueTimeout !== undefined ? { queueTimeoutMs: config.defaultQueueTimeout } : {}),
    maxPreemptions: config.defaultMaxPreemptions,
  };
}

/** The LimitDefaults of a controller started with none of its limit flags set. */
export function builtInControllerDefaults(): LimitDefaults {
  const ms = Object.fromEntries(
    Object.entries(CONTROLLER_LIMIT_FLAGS).map(([key, text]) => [key, parseDuration(text)]),
  ) as { [key in keyof typeof CONTROLLER_LIMIT_FLAGS]: number };
  return limitDefaults({ ...ms, defaultMaxPreemptions: DEFAULT_MAX_PREEMPTIONS });
}
