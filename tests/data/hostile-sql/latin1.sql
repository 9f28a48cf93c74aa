-- café: this file is Latin-1, not UTF-8 (byte 0xe9 on line 1)
select 1 as x
