"""Selection, pure math on arrays that never touches a model: matrix entropy (Eq. 4-6, `entropy`),
linear and conditional CKA (Eq. 7-8, `cka`), spectral bounds (`bounds`), the set scorer (`scorer`),
ELSI / ELSI-C beam search (Alg. 1-2, `select`), numeric scaling (`scale`), BLAS threads (`threads`)
and engine layer-id conventions (`conventions`)."""
