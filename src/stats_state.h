/*-------------------------------------------------------------------------
 *
 * stats_state.h
 *	  The counters' shared memory set aside, and kept across a clean
 *	  restart.
 *
 * src/stats_state.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_STATS_STATE_H
#define TOKENBUCKET_STATS_STATE_H

extern void stats_state_init(void);

#endif							/* TOKENBUCKET_STATS_STATE_H */
