-- nothing but comments and an empty statement
/* a block comment */
;
