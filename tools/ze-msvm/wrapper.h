/* Level Zero headers for bindgen: the DDI headers include the API headers. */
#include <level_zero/ze_ddi.h>
#include <level_zero/zet_ddi.h>
#include <level_zero/zes_ddi.h>
