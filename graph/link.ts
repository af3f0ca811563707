/**
 * The link MTU's range, once: the configuration schema, every driver and the interface table
 * check against it (68: the IPv4 minimum, RFC 791; 65535: the largest IPv4 packet).
 */
export const MTU_MIN = 68;
export const MTU_MAX = 65535;
/** An interface's MTU when its configuration sets none (Ethernet's). */
export const DEFAULT_MTU = 1500;

/** `mtu` if it is an integer in MTU_MIN..MTU_MAX; else a RangeError naming `where`. */
export function checkMtu(mtu: number, where: string): number {
  if (!Number.isInteger(mtu) || mtu < MTU_MIN || mtu > MTU_MAX)
    throw new RangeError(`${where}: mtu must be an integer in ${MTU_MIN}..${MTU_MAX}, got ${mtu}`);
  return mtu;
}
