/*-------------------------------------------------------------------------
 *
 * shard_call.h
 *	  Calls through tokenbucket_proxy: the shard's side (tb_routed_call)
 *	  and the proxy's bound on a call (tokenbucket.proxy_timeout).
 *
 * src/shard_call.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_SHARD_CALL_H
#define TOKENBUCKET_SHARD_CALL_H

extern void shard_call_init(void);

#endif							/* TOKENBUCKET_SHARD_CALL_H */
