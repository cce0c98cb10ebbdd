/* tokenbucket--1.8--1.9.sql: what 1.9 changes (see CHANGELOG.md). */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.9'" to load this file. \quit
