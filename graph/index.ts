/** The vector engine. Knows nothing of any protocol, driver or API. */
export * from './buffer-pool.ts';
export * from './chain-copy.ts';
export * from './ext-memory.ts';
export * from './clock.ts';
export * from './graph.ts';
export * from './memory.ts';
export * from './node.ts';
export * from './timer-wheel.ts';
export * from './format.ts';
export * from './link.ts';
export * from './handoff-queue.ts';
