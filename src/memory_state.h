/*-------------------------------------------------------------------------
 *
 * memory_state.h
 *	  The memory store across server starts, for memory_store.c.
 *
 * src/memory_state.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_MEMORY_STATE_H
#define TOKENBUCKET_MEMORY_STATE_H

extern void memory_state_init(void);

#endif							/* TOKENBUCKET_MEMORY_STATE_H */
