/*-------------------------------------------------------------------------
 *
 * routed.h
 *	  Calls through tokenbucket_proxy: the shard's side (tb_routed_call)
 *	  and the proxy's bound on a call (tokenbucket.proxy_timeout).
 *
 * src/routed.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_ROUTED_H
#define TOKENBUCKET_ROUTED_H

extern void routed_init(void);

#endif							/* TOKENBUCKET_ROUTED_H */
